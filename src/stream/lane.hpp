// A lane is where the stream engine puts work in stream order: a CUDA
// stream, or an emulated one (an ordered host executor, for machines
// without a GPU and for CI). The engine writes every enqueued operation as
// lane work (pack, unpack, copies) and two kinds of flag operations: the
// stream writes a word when it reaches a point, and waits on a word the
// progress thread (or another stream) writes. On a CUDA stream these are
// stream memory operations on mapped pinned words (cuStreamWriteValue32 and
// cuStreamWaitValue32; a polling kernel for waits on a thread's words,
// Writer below), so the stream goes on with no host thread in its path;
// where the driver lacks them, host functions stand in (they touch only
// host words, never a CUDA API). MPI-free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "transport/mover.hpp"
#include "util/status.hpp"

namespace loom::stream {

// Memory the host and the lane's work both reach: `host` for the MPI and the
// progress thread, `dev` for the lane's kernels (the same bytes).
struct Block {
  void* host = nullptr;
  void* dev = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> hold;  // frees the memory with the last copy
};

// (int32_t)(word - value) >= 0: the comparison cuStreamWaitValue32's GEQ
// makes, so counters may wrap.
inline bool reached(uint32_t word, uint32_t value) {
  return static_cast<int32_t>(word - value) >= 0;
}

// Where a receive's bytes lie, published by the progress thread once they
// have landed (in a block, so that the lane's work reaches it): a copy
// enqueued earlier reads it only when the stream gets there.
struct Landed {
  uint64_t address = 0;  // as the lane's work addresses it
  uint64_t bytes = 0;
  // Nonzero: a word the sender's stream writes once its pack is done (as
  // the lane's work addresses it), which reaches wait_value then: an early
  // lent send's header comes before its bytes (Lane::wait_landed).
  uint64_t wait_word = 0;
  uint64_t wait_value = 0;
};

// What a pulled receive's copy waits for first, on the stream (a receive
// that may take an early send, LOOM_STREAM_EARLY_SEND): a CUDA lane makes
// the waits and a small copy one launch.
struct PullWaits {
  uint32_t* release = nullptr;  // a release word the progress thread writes (host address)
  uint32_t value = 0;
  bool sender = false;  // Landed::wait_word, once the thread has published it
};

// Who writes a word a stream waits for. On an H200 under MPS a stream
// memory operation (cuStreamWaitValue32) that finds its word short is
// woken late when a host thread writes it: the MPIX ping-pong ran 5-11 us
// a round trip faster with the polling wait kernel there, while the MPIS
// pairs' single waits, on words other streams write, ran 7-13 us slower
// with it (docs/results/stream-h200-waits.md). Several words are always
// one polling kernel, whoever writes them.
enum class Writer { kThread, kStream };

// One pack (user -> packed) or unpack (packed -> user) of a batch; with
// `from`, a transfer: src is a buffer in layout `from`, dst one in layout m
// (CUDA lanes only, where cuda_transfer_possible says so).
struct LaneJob {
  const transport::Message* m = nullptr;
  const void* src = nullptr;
  void* dst = nullptr;
  bool pack = true;
  const transport::Message* from = nullptr;
};

class Lane {
 public:
  virtual ~Lane() = default;
  virtual bool emulated() const = 0;
  // Makes the calling thread (the progress thread) use the lane's GPU, so
  // the MPI calls it makes for the lane reach the right device.
  virtual void enter() {}
  // The same for a while: returns what leave() restores (held sends are
  // launched from whichever thread flushes them, in a later call).
  virtual int enter_for_now() { return -1; }
  virtual void leave(int /*was*/) {}
  // Whether a send's pack may be held back and launched later, possibly
  // from another thread (not on the per-thread default stream, which is
  // another stream in each thread).
  virtual bool holds() const { return true; }
  // What pack() of m will need (a CUDA lane's device layout), made now so
  // that a held pack's error reaches the call that enqueued it.
  virtual Status prepare(const transport::Message& /*m*/) { return Status::ok(); }
  // The stream sets *word = value when it reaches this point (word is the
  // host address of a block from alloc()).
  virtual Status write(uint32_t* word, uint32_t value) = 0;
  // The stream waits here until reached(*word, value); `by` writes the word.
  virtual Status wait(uint32_t* word, uint32_t value, Writer by) = 0;
  // Packs m from `user` into `packed` (a block's bytes, host address), and
  // the reverse; ordered on the stream.
  virtual Status pack(const transport::Message& m, const void* user, void* packed) = 0;
  virtual Status unpack(const transport::Message& m, const void* packed, void* user) = 0;
  // Copies between the user's memory and a block (host address), ordered.
  virtual Status copy_in(void* block, const void* user, size_t bytes) = 0;
  virtual Status copy_out(void* user, const void* block, size_t bytes) = 0;
  // Copies landed->bytes (at most `max`) from landed->address into dst,
  // both read when the stream gets here (`landed`: host address in a block),
  // after the waits of `first`.
  virtual Status copy_from(const Landed* landed, void* dst, size_t max, const PullWaits& first) = 0;
  // Batches, in order on the stream: a CUDA lane makes each one or a few
  // launches (a launch costs microseconds of the stream's time, and a halo
  // of 26 neighbours has 26 of each). Words: host addresses of words the
  // GPU reaches (a block's, or a registered page's).
  virtual Status run_many(const LaneJob* jobs, size_t n);
  // run_many, then write(word, value), the word written by the jobs' last
  // kernel where the lane can.
  virtual Status run_many_write(const LaneJob* jobs, size_t n, uint32_t* word, uint32_t value);
  virtual Status write_many(uint32_t* const* words, const uint32_t* values, size_t n);
  virtual Status wait_many(uint32_t* const* words, const uint32_t* values, size_t n, Writer by);
  virtual Status launch_host(void (*fn)(void*), void* arg) = 0;
  virtual Status synchronize() = 0;
  // Mapped memory for words and staging (not zeroed).
  virtual Result<Block> alloc(size_t bytes) = 0;
};

// An emulated stream: tasks run one after another on its own thread. A
// wait task blocks it, as a stream waits, until its word is reached.
class HostStream {
 public:
  HostStream();
  ~HostStream();  // finishes the queued work first
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  void push(std::function<void()> task);
  void synchronize();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

std::unique_ptr<Lane> make_host_lane(HostStream* s);

// A lane on a CUDA stream (the caller's cudaStream_t, as an opaque value).
// Fails without a CUDA build or a usable GPU.
Result<std::unique_ptr<Lane>> make_cuda_lane(void* cuda_stream);
// Waits for a CUDA stream / runs a host function on it (the public helpers).
Status cuda_synchronize(void* cuda_stream);
Status cuda_launch_host(void* cuda_stream, void (*fn)(void*), void* arg);
// A CUDA lane's run_many can move `from` at src into `to` at dst in one kernel.
bool cuda_transfer_possible(const transport::Message& from, const void* src,
                            const transport::Message& to, const void* dst);
// Makes host memory shared with other processes (a page of pair words)
// reachable by CUDA streams' memory operations: registers it mapped.
Status cuda_attach_host_words(void* page, size_t bytes);
// The same for a page of ready words (read-only: a peer's), giving the
// address streams reach it at.
Result<void*> cuda_attach_ready_page(void* page, size_t bytes, bool read_only);
// Frees what the CUDA lanes keep for the process (layout cache, pinned
// pool), at finalize.
void cuda_lanes_release();

}  // namespace loom::stream
