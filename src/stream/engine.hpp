// The stream engine: operations enqueued on a lane (a CUDA or emulated
// stream) and the progress thread that moves their bytes through the MPI.
//
// Each enqueued operation is, on its lane, (GPU work that stages the data),
// a point where the stream writes its position word (the trigger), and
// later a wait on a release word. The progress thread posts the operation
// to the MPI once the lane's position reaches its trigger (so enqueue order
// on a lane is posting order, and an operation is posted when the stream
// gets to it, as MPICH does), tests it, and writes the release word: for a
// staged send once it is posted (its bytes are already staged), for a
// receive once its bytes have landed. The stream then goes on in order
// (unpack kernels, the user's next kernels) with no host thread waiting.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mpi/type_registry.hpp"
#include "stream/lane.hpp"
#include "transport/mover.hpp"

namespace loom::stream {

class Pairs;

// A release word of a channel, taken by one operation.
struct Slot {
  int index = -1;
  uint32_t value = 0;
};

// One MPIX stream or MPIS queue: its lane, the position word the stream
// writes and the release words it waits on.
class Channel {
 public:
  static Result<std::shared_ptr<Channel>> create(std::shared_ptr<Lane> lane);
  Lane& lane() { return *lane_; }
  // Enqueues "the stream writes its next position"; returns that position.
  // Call under mu().
  Result<uint32_t> mark();
  // Enqueues lane().run_many(jobs, n), then the same as mark(), as one
  // stream operation where the lane can. Call under mu().
  Result<uint32_t> run_mark(const LaneJob* jobs, size_t n);
  // An enqueued send's pack held back (MPIX_Isend_enqueue), so that a burst
  // of them goes to the stream as one launch: the position it would write is
  // taken now; the launch's last kernel writes the highest held. Call under
  // mu(). True: the first held since the last flush.
  Result<uint32_t> hold_pack(const transport::Message& m, const void* src, void* dst,
                             const mpi::TypeRegistry::Entry& keep, bool* first);
  // Enqueues the held packs (under mu()). mark() and run_mark() do it first,
  // so positions reach the stream in order; any other work on the lane must
  // call it first where it may wait for a held send.
  Status flush();
  bool holding() const { return !held_.empty(); }
  // Packs held so far, every channel (loom_stream_held_sends).
  static std::atomic<long long> held_packs_;
  // A free release word (waits for one when all are taken, after
  // enqueuing what is held). Call under mu().
  Slot take();
  Status wait(const Slot& s) { return lane_->wait(word(s.index), s.value, Writer::kThread); }
  // The word a wait on s reads (host address), and whether the progress
  // thread has released s already (a wait on it would pass at once).
  uint32_t* word_of(const Slot& s) { return word(s.index); }
  bool released(const Slot& s) {
    return reached(
        reinterpret_cast<std::atomic<uint32_t>*>(word(s.index))->load(std::memory_order_acquire),
        s.value);
  }
  // Progress thread: releases the stream waiting on s, frees the word.
  void release(const Slot& s);
  uint32_t position() const;
  // The last position enqueued (call under mu()).
  uint32_t last() const { return seq_; }
  // The stream has not reached the last point enqueued on it.
  bool busy() {
    std::lock_guard<std::mutex> lk(mu_);
    return !reached(position(), seq_);
  }
  std::mutex& mu() { return mu_; }
  // Operations submitted and not yet retired.
  std::atomic<int> in_flight{0};

  static constexpr int kSlots = 1024;
  static constexpr size_t kHeldMax = 48;  // held packs go together at most this many

 private:
  uint32_t* word(int i) { return static_cast<uint32_t*>(words_.host) + 16 * (i + 1); }
  struct Held {
    transport::Message m;
    const void* src;
    void* dst;
    mpi::TypeRegistry::Entry keep;  // the type, until the pack is enqueued
  };
  std::vector<Held> held_;
  std::shared_ptr<Lane> lane_;
  Block words_;  // word 0: position; words 16 (i + 1): release word i (own cache lines)
  std::shared_ptr<void> gate_;  // keeps CUDA frees held back (pack/free_gate.hpp)
  std::mutex mu_;
  uint32_t seq_ = 0;
  std::mutex slot_mu_;
  std::vector<uint32_t> gen_;
  std::vector<int> free_;
};

struct Op {
  enum class Kind { kSend, kRecv, kAllreduce };
  Kind kind = Kind::kSend;
  std::shared_ptr<Channel> ch;
  uint32_t start = 0;  // posted once the lane's position reaches it
  // Posted when enqueued, in call order behind any operation of its kind
  // and communicator still waiting for its trigger; no trigger. A receive
  // into staging (LOOM_STREAM_EARLY_RECV), or a lent send whose stream
  // flags its pack (LOOM_STREAM_EARLY_SEND; the stream never waits for it).
  bool early = false;
  // A pulled receive on a communicator with early sends: its stream waits
  // for the sender's flag (Landed::wait_word) before it copies.
  bool sender_flags = false;
  // (1 << 32) | the position the stream writes where it waits for an early
  // receive: a short message's tail fix reads the user's bytes only then.
  std::atomic<uint64_t> at_wait{0};
  Slot slot;  // released when posted (release_on_post) or done
  bool release_on_post = false;
  std::atomic<uint64_t> retire{0};  // (1 << 32) | position after the stream's last use
  // The MPI call: interposed (Loom's own MPI_Isend/MPI_Irecv, which every
  // other rank's Loom understands) unless `raw` (the MPI itself: private
  // channels and host mirrors).
  bool raw = false;
  const void* sbuf = nullptr;
  void* rbuf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_BYTE;
  bool own_type = false;  // a byte type of its own (over 2 GiB), freed at the end
  int peer = 0, tag = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Op op = MPI_OP_NULL;
  // A device receive: when fewer bytes than `expect` land, the progress
  // thread packs the user's current bytes into the staging's tail first, so
  // the stream's full unpack leaves them as they were.
  bool tail_fix = false;
  transport::Message msg;
  mpi::TypeRegistry::Entry keep;
  // By the device method's protocol (Buffer::How::kLent / kPulled,
  // enqueue.hpp). A send: its header; its arena room is marked packed when
  // the header is posted. A receive: `landed` (in staging) is where the
  // thread publishes its bytes; once the stream is past its copy, a
  // header's sender is acked and `scratch` (arena room its copy lands in,
  // unpacked from there) goes back.
  alignas(8) unsigned char wire[128] = {};
  uint64_t lent_seq = 0;
  bool pulled = false;
  Landed* landed = nullptr;
  bool ack_at_retire = false;
  void* scratch = nullptr;
  std::shared_ptr<void> pin;  // a TypePin: the user's type, passed to the MPI when posted
  void* user = nullptr;
  size_t expect = 0;
  Block staging, staging2;
  // A pulled receive above LOOM_STREAM_PINNED_MAX: the MPI lands its bytes
  // in reserved address space (`landing`); raw bytes are copied into pinned
  // memory (`raw_copy`) when they land (enqueue.cpp, lands_in_reserve).
  Block landing, raw_copy;
  // Completion, for the requests of MPIX_I*_enqueue and MPIS rounds.
  std::mutex mu;
  MPI_Status* status_out = nullptr;  // written at completion (under mu)
  MPI_Status st{};
  bool done = false;  // under mu
  MPI_Request greq = MPI_REQUEST_NULL;
  // Under mu: the thread has completed greq; its wait freed it before that
  // (the thread frees it once complete: Open MPI under MPI_THREAD_MULTIPLE
  // mishandles freeing an active request, and Loom's own MPI_Request_free
  // would keep testing it in every later call).
  bool greq_complete = false, greq_free = false;
  std::shared_ptr<std::atomic<int>> active;  // decremented when done
  // Progress thread only.
  MPI_Request req = MPI_REQUEST_NULL;
  bool posted = false, released = false;
  std::chrono::steady_clock::time_point posted_at{};
  bool overdue = false;  // said so once
  // LOOM_STREAM_TRACE: when it was enqueued, posted, done (steady clock, ns).
  int64_t t_enqueued = 0, t_posted = 0, t_done = 0;
  int64_t bytes = 0;  // the message's packed bytes (a receive: its buffer's)
};

// A lent send posted when enqueued (Op::early): its stream does not wait for it.
inline bool early_send(const Op& op) {
  return op.early && op.kind == Op::Kind::kSend;
}

// Pulled receives: what landed (a header's bytes found, raw bytes in
// staging) published to op.landed, with the status set (progress thread).
void land(Op& op);
// Once the stream is past an operation's last use: acks and scratch back.
void retired(Op& op);

class Engine {
 public:
  Engine();
  ~Engine();
  // Stops the progress thread after the operations in flight (at finalize).
  void shutdown();

  // Hands an operation to the progress thread (it was enqueued on its lane).
  void submit(std::shared_ptr<Op> op);
  // Completed generalized requests the thread frees (the application
  // thread's MPI calls wait for the MPI's lock while the thread tests), and
  // objects whose last reference it drops (an enqueued wait's requests:
  // their operations' staging goes back to its pool there, off the
  // application thread).
  void later(std::vector<MPI_Request> frees, std::vector<std::shared_ptr<void>> drops);

  // Channels holding sends' packs (Channel::hold_pack; call holding() after
  // a first hold, under the channel's mu()). What they hold is enqueued by
  // the next call of the stream APIs that enqueues, waits or frees
  // (flush_held(): every channel, and it returns once flushes other threads
  // began are done too), or by a thread of its own (Engine::flusher): 50 us
  // after the last hold, at once when Loom's completion calls ask
  // (flush_soon()), and at the latest kHoldMaxUs after the list of holding
  // channels was last empty, so a send held by a program that makes no
  // further call still goes. Never from the progress thread: a launch may
  // wait for a stream that waits for that thread.
  void holding(std::shared_ptr<Channel> ch);
  void held_one();
  void flush_held();
  void flush_soon();
  // LOOM_STREAM_HOLD, read once.
  bool hold_on() const { return hold_on_; }
  static constexpr int64_t kHoldUs = 50;
  static constexpr int64_t kHoldMaxUs = 1000;

  // The lane for a stream value: an emulated stream made here, or a CUDA
  // stream.
  Result<std::shared_ptr<Lane>> lane_for(void* stream);
  void* host_stream_create();
  bool host_stream_free(void* s);
  HostStream* host_stream(void* s);

  // Loom's own duplicate of MPI_COMM_WORLD (MPIS rounds go on it), and one
  // for the answers of MPIS_Match (stream/pair.hpp).
  MPI_Comm world() const { return world_; }
  MPI_Comm answers() const { return answers_; }
  // Matched MPIS pairs of this node (stream/pair.hpp).
  Pairs& pairs() { return *pairs_; }
  int tag_ub() const { return tag_ub_; }
  // The attribute key of stream communicators (made on first use).
  int keyval(MPI_Comm_delete_attr_function* on_free);
  std::atomic<long long> host_actions{0};
  std::atomic<long long> pair_rounds{0};     // MPIS rounds on the on-node pair path
  std::atomic<long long> lent_messages{0};   // loom_stream_lent_messages
  std::atomic<long long> early_receives{0};  // loom_stream_early_receives
  std::atomic<long long> early_sends{0};     // loom_stream_early_sends

  // Live handles of the stream APIs, so that a freed or foreign handle is an
  // MPI error, not a crash.
  enum class Kind { kStream, kQueue, kRequest, kEnqueued };
  void put(Kind k, uintptr_t key, std::shared_ptr<void> obj);
  std::shared_ptr<void> get(Kind k, uintptr_t key);
  std::shared_ptr<void> take(Kind k, uintptr_t key);
  uintptr_t next_handle() { return ++handles_; }

 private:
  void run();
  void flusher();
  std::vector<std::shared_ptr<Channel>> take_held_locked();
  void flush_list(std::vector<std::shared_ptr<Channel>>& chans, bool restore);
  std::mutex held_mu_;
  std::condition_variable held_cv_;
  std::vector<std::shared_ptr<Channel>> held_chans_;  // under held_mu_
  std::atomic<int> n_held_{0};                        // held_chans_.size(), read without it
  std::atomic<int64_t> last_hold_ns_{0};
  int64_t first_hold_ns_ = 0;     // under held_mu_: when the list went non-empty
  std::atomic<int> flushing_{0};  // lists taken, not yet flushed (changed under held_mu_)
  bool urgent_ = false;           // under held_mu_: flush_soon() asked
  bool flush_stop_ = false;       // under held_mu_
  bool hold_on_ = true;
  std::thread flusher_;
  // LOOM_STREAM_TRACE: a row per retired operation, written at shutdown.
  void trace(const Op& op);
  void write_trace();
  bool tracing_ = false;
  long post_pass_delay_us_ = 0;  // LOOM_TEST_POST_PASS_DELAY_US
  std::vector<std::string> trace_;
  bool post(Op& op);
  bool test(Op& op);
  // An early receive's short message may be finished only once its stream
  // waits for it (Op::at_wait).
  static bool tail_ready(const Op& op);
  // The stream has reached the point where it waits for an early receive.
  static bool stream_waits(const Op& op);
  void finish(Op& op);

  MPI_Comm world_ = MPI_COMM_NULL, answers_ = MPI_COMM_NULL;
  std::unique_ptr<Pairs> pairs_;
  int tag_ub_ = 32767;
  int keyval_ = MPI_KEYVAL_INVALID;
  // What the thread is handed (an operation, or a request to free): a
  // lock-free stack it takes whole (Engine::drain); mu_ and cv_ only put it
  // to sleep when it has nothing to do.
  struct Incoming {
    std::shared_ptr<Op> op;
    Incoming* next = nullptr;
    std::vector<MPI_Request> frees;
    std::vector<std::shared_ptr<void>> drops;
  };
  void push(Incoming* n);
  Incoming* drain();  // everything pushed so far, in push order
  std::atomic<Incoming*> inbox_{nullptr};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> started_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};
  bool stop_ = false;
  std::thread thread_;
  std::mutex reg_mu_;
  std::map<std::pair<int, uintptr_t>, std::shared_ptr<void>> reg_;
  std::atomic<uintptr_t> handles_{0};
  std::mutex hs_mu_;
  std::unordered_map<void*, std::unique_ptr<HostStream>> host_streams_;
};

// The engine of the runtime; null (and an MPI error raised on comm) when
// Loom is not active or the MPI gives no MPI_THREAD_MULTIPLE.
Engine* engine(MPI_Comm comm_for_errors, int* rc);

}  // namespace loom::stream
