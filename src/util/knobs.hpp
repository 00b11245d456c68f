// Every LOOM_* setting is declared once, in LOOM_KNOBS below: name, environment
// variable, default and documentation on one row (as NCCL_PARAM / UCX config
// tables do). Values are read from the environment once, on first use or at
// knobs_reload() (which MPI_Init calls), and cached.
#pragma once

#include <string>
#include <vector>

namespace loom {

// X(field, ENV_NAME, default string, documentation)
#define LOOM_KNOBS(X)                                                                           \
  X(disable, "LOOM_DISABLE", "0", "1: Loom does nothing; every call goes straight to MPI")      \
  X(log, "LOOM_LOG", "warn", "log level: error|warn|info|debug (per rank, to stderr)")          \
  X(log_subsys, "LOOM_LOG_SUBSYS", "all",                                                       \
    "comma list of subsystems to log: type,pack,model,transport,mpi or all")                    \
  X(method, "LOOM_METHOD", "auto",                                                              \
    "how device messages move: device|oneshot|staged|auto (all ranks alike)")                   \
  X(coll_method, "LOOM_COLL_METHOD", "auto",                                                    \
    "how collectives on device buffers run: node (the node-local engine, where every rank "     \
    "can)|staged (pipelined through host staging)|mirror (the MPI's own on host "               \
    "mirrors)|nccl|auto (all ranks alike)")                                                     \
  X(coll_node_min, "LOOM_COLL_NODE_MIN", "32768",                                               \
    "auto: smallest collective (bytes each rank receives) for the node-local engine")           \
  X(coll_schedule_min, "LOOM_COLL_SCHEDULE_MIN", "262144",                                      \
    "auto: smallest nonblocking collective (bytes each rank receives) run as a schedule")       \
  X(coll_nccl_nonblocking, "LOOM_COLL_NCCL_NONBLOCKING", "1",                                   \
    "1: nonblocking Allreduce, Reduce, Bcast, Allgather and Alltoall on NCCL where every rank " \
    "has a GPU of its own and the schedules cannot run (off the node); 0: the MPI's own on "    \
    "host mirrors there (all ranks alike)")                                                     \
  X(coll_pipeline_min, "LOOM_COLL_PIPELINE_MIN", "1048576",                                     \
    "auto: smallest blocking collective (bytes each rank receives) staged through host "        \
    "memory in pipelined chunks where the node-local engine cannot run (ranks on several "      \
    "nodes, or no CUDA IPC; all ranks alike)")                                                  \
  X(coll_pipeline_chunk, "LOOM_COLL_PIPELINE_CHUNK", "1048576",                                 \
    "the chunk (bytes) of pipelined staged collectives: one chunk goes down to host memory "    \
    "while the one before is exchanged by the MPI and the one before that goes up")             \
  X(coll_lend_min, "LOOM_COLL_LEND_MIN", "4194304",                                             \
    "node-local collectives read contiguous device buffers of at least this many bytes "        \
    "where they lie (whole 2 MiB pages of a cudaMalloc allocation, which peers map through "    \
    "CUDA IPC and keep mapped) and Allreduce folds straight into the ranks' outputs; -1: "      \
    "every buffer is copied into Loom's segments (all ranks alike)")                            \
  X(cache_dir, "LOOM_CACHE_DIR", "",                                                            \
    "directory of loom-measure's profiles (else $XDG_CACHE_HOME/loom, else ~/.cache/loom)")     \
  X(profile, "LOOM_PROFILE", "", "profile file to use instead of the cache directory's")        \
  X(zcopy_min, "LOOM_ZCOPY_MIN", "",                                                            \
    "device method: smallest contiguous message lent from the sender's own buffer (no "         \
    "copy; its send completes once the receiver has read it); unset: from 128 B, not under "    \
    "MPI_THREAD_MULTIPLE; off or negative: never; all ranks alike")                             \
  X(zcopy_types, "LOOM_ZCOPY_TYPES", "16",                                                      \
    "with zero-copy on, messages of derived types are lent too: the receiver reads them "       \
    "straight out of the sender's buffer in the sender's layout (no pack on the sender's "      \
    "side), where the bytes the data spans are at most this many times the data (or 2 MiB "     \
    "at most); all: any layout; off: they are packed into segments")                            \
  X(proxy, "LOOM_PROXY", "0",                                                                   \
    "1: a resident copy agent (one block of a kernel that stays on the GPU while messages "     \
    "come, and leaves after LOOM_PROXY_IDLE_US without any) makes the copies of contiguous "    \
    "zero-copy receives up to LOOM_PROXY_MAX bytes, with no CUDA call on the host's side")      \
  X(proxy_max, "LOOM_PROXY_MAX", "131072",                                                      \
    "largest copy the copy agent makes (bytes); larger ones go to the copy engines")            \
  X(proxy_idle_us, "LOOM_PROXY_IDLE_US", "200",                                                 \
    "the copy agent leaves the GPU after this long without requests (an application's "         \
    "cudaDeviceSynchronize waits for it at most this long)")                                    \
  X(wait_flag, "LOOM_WAIT_FLAG", "1",                                                           \
    "1: Loom waits for its stream's copies and kernels by polling a ticket the stream writes "  \
    "into mapped host memory (under MPS 0.4-1 us less a wait than cudaStreamSynchronize); "     \
    "0: cudaStreamSynchronize")                                                                 \
  X(pipeline_chunk, "LOOM_PIPELINE_CHUNK", "",                                                  \
    "staged messages go in pipelined chunks of this many bytes (unset or 0: off; all "          \
    "ranks alike)")                                                                             \
  X(pipeline_min, "LOOM_PIPELINE_MIN", "4194304",                                               \
    "smallest staged message sent in pipelined chunks (bytes)")                                 \
  X(batch_packs, "LOOM_BATCH_PACKS", "auto",                                                    \
    "device method: the packs of sends posted one after another go in a few batch launches "    \
    "at the next completion call, receive or wait for a pack (or 50 us later, by a thread "     \
    "of Loom's): 1|0|auto (on unless MPI was initialised with MPI_THREAD_MULTIPLE)")            \
  X(batch_flush, "LOOM_BATCH_FLUSH", "64",                                                      \
    "with LOOM_BATCH_PACKS: a batch is launched at once when this many packs wait")             \
  X(mpi_cuda_aware, "LOOM_MPI_CUDA_AWARE", "auto",                                              \
    "the MPI moves device memory itself: auto (MPIX_Query_cuda_support, or UCX with CUDA "      \
    "under Open MPI's pml ucx)|1 (trust it)|0; then contiguous device messages to other "       \
    "nodes go straight to it")                                                                  \
  X(nccl_p2p, "LOOM_NCCL_P2P", "0",                                                             \
    "1: the device method reaches GPUs on other nodes through NCCL (MPI_Init then asks "        \
    "for MPI_THREAD_MULTIPLE); force: every other process, this node's too (each on a GPU "     \
    "of its own; tests); all ranks alike")                                                      \
  X(mpis_pair, "LOOM_MPIS_PAIR", "1",                                                           \
    "matched MPIS pairs of one node move their rounds on the two streams alone (no progress "   \
    "thread, no MPI): the receiver's stream reads the sender's packed bytes or buffer "         \
    "through shared memory once the sender's stream flags them; 0: through the MPI")            \
  X(mpis_zcopy_min, "LOOM_MPIS_ZCOPY_MIN", "0",                                                 \
    "on-node MPIS pairs: smallest send read straight out of the sender's buffer (contiguous, "  \
    "or a derived type in its own layout); such a send completes once read (synchronous "       \
    "mode). Smaller sends are packed into a segment first and complete at their start "         \
    "(eager); off: all packed")                                                                 \
  X(stream_lend, "LOOM_STREAM_LEND", "1",                                                       \
    "MPIX_*_enqueue device messages of one node (with the device method on) go by its "         \
    "protocol: packed on the sender's stream into a lent segment, copied by the receiver's "    \
    "stream from where the progress thread found the bytes; 0: through host staging")           \
  X(stream_lend_min, "LOOM_STREAM_LEND_MIN", "65536",                                           \
    "smallest enqueued message (send) or receive buffer (receive) that takes that "             \
    "protocol: below, a derived type's receive would pay more stream work (a copy from where "  \
    "the bytes lie, then an unpack) than its staging does; all ranks alike")                    \
  X(stream_hold, "LOOM_STREAM_HOLD", "1",                                                       \
    "an MPIX_Isend_enqueue's pack is held back to go with the packs of the sends after it as "  \
    "one launch, at the next stream call that enqueues, waits or frees, 48 held, or from a "    \
    "thread of Loom's 50 us after the last, when a completion call wakes it, and at most 1 ms " \
    "after the first (other work enqueued meanwhile runs before it); 0: launched at the call")  \
  X(stream_early_recv, "LOOM_STREAM_EARLY_RECV", "1",                                           \
    "enqueued device receives into staging (a type Loom reads) are posted to the MPI when "     \
    "enqueued, in call order behind any receive of the communicator still waiting for its "     \
    "stream; the stream waits only for the bytes; 0: posted when the stream reaches them")      \
  X(stream_early_send, "LOOM_STREAM_EARLY_SEND", "0",                                           \
    "1: an enqueued send lent to a process of the node posts its header when enqueued; the "    \
    "sender's stream flags its pack, and the receiving stream waits for that flag itself, "     \
    "with no host thread between (all ranks alike; a host thread's receive of such a message "  \
    "waits in its completion call until the sender's stream has packed it)")                    \
  X(stream_arena, "LOOM_STREAM_ARENA", "268435456",                                             \
    "bytes of device memory each process lends once for those messages (mapped by the "         \
    "node's other processes when a stream communicator is made); a message that finds it "      \
    "full is staged; 0: none (4 MiB of shared memory in the host test mode)")                   \
  X(test_stream_direct, "LOOM_TEST_STREAM_DIRECT", "0",                                         \
    "test only: enqueued device messages go by Loom's own point-to-point from the stream "      \
    "thread; can deadlock on a GPU (docs/stream.md)")                                           \
  X(stream_pinned_max, "LOOM_STREAM_PINNED_MAX", "1048576",                                     \
    "an enqueued device receive that may be lent a message (LOOM_STREAM_LEND) keeps pinned "    \
    "staging for the whole message up to this many bytes; above, the MPI lands it in "          \
    "reserved address space (a lent message's header touches one page) and bytes that come "    \
    "raw are copied into pinned memory when they land; off: always pinned")                     \
  X(pool_cache_max, "LOOM_POOL_CACHE_MAX", "1073741824",                                        \
    "free bytes each GPU staging or scratch pool keeps for reuse (0: none); past it, releases " \
    "free the largest idle buffers (none while stream-triggered communication may wait for "    \
    "host threads, when the cache may exceed it: docs/stream.md)")                              \
  X(stream_trace, "LOOM_STREAM_TRACE", "",                                                      \
    "diagnostics: a path prefix; each rank's stream engine writes PREFIX.RANK.csv at "          \
    "finalize, a row per enqueued operation with the times (CLOCK_MONOTONIC ns, one clock "     \
    "for the node) it was enqueued, posted to the MPI, done and retired")                       \
  X(stats, "LOOM_STATS", "0",                                                                   \
    "each rank prints where its time went inside Loom (phases of the device paths: calls, "     \
    "total and mean time) at MPI_Finalize")                                                     \
  X(memtype_cache, "LOOM_MEMTYPE_CACHE", "on",                                                  \
    "device allocations seen are remembered: on|verify (a hit also checks the driver's "        \
    "buffer id)|off (every buffer asks the driver)")                                            \
  X(test_host_as_device, "LOOM_TEST_HOST_AS_DEVICE", "0",                                       \
    "test only: treat host buffers as device buffers (host engine), to test without a GPU")     \
  X(test_no_pools, "LOOM_TEST_NO_POOLS", "0",                                                   \
    "test only: every staging and scratch pool request fails, to test the fallbacks")           \
  X(test_off_node, "LOOM_TEST_OFF_NODE", "0",                                                   \
    "test only: every other rank counts as on another node (one rank per node)")                \
  X(test_post_pass_delay_us, "LOOM_TEST_POST_PASS_DELAY_US", "0",                               \
    "test only: the stream progress thread waits this long after each operation it finds "      \
    "short of its trigger in a posting pass, so that the stream moves on mid-pass (a later "    \
    "operation of the lane must still not be posted first)")                                    \
  X(test_pack_delay_us, "LOOM_TEST_PACK_DELAY_US", "0",                                         \
    "test only: the host engine runs device-method packs this late, in a thread of its "        \
    "own, as a GPU may (receivers and senders must wait for their ready words)")

struct Knobs {
#define LOOM_KNOB_FIELD(field, env, def, doc) std::string field;
  LOOM_KNOBS(LOOM_KNOB_FIELD)
#undef LOOM_KNOB_FIELD
};

struct KnobInfo {
  const char* env;
  const char* def;
  const char* doc;
  std::string value;  // value in force
};

const Knobs& knobs();                // cached settings
void knobs_reload();                 // re-read the environment (MPI_Init, tests)
std::vector<KnobInfo> knob_table();  // for `loom-inspect --config`
bool knob_true(const std::string& v);
// Settings the last read refused (a number's place holding another word):
// one line each, for MPI_Init to warn with; their defaults are in force.
std::vector<std::string> knob_problems();

}  // namespace loom
