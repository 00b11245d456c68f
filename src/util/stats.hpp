// Where a rank's time goes inside Loom (LOOM_STATS=1): wall time, calls and
// the median call per phase of the device paths, printed by each rank at
// MPI_Finalize. The median is what a steady loop pays: a mean also carries
// first-use costs (IPC opens, pool growth). Off, a phase costs one relaxed
// load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace loom::stats {

#define LOOM_STAT_PHASES(X)                                                \
  X(kSend, "send (device buffer, whole call)")                             \
  X(kRecvPost, "receive posted (device buffer)")                           \
  X(kPlan, "plan: memory type, type lookup, method")                       \
  X(kLend, "lend: segment and pack enqueued, or buffer lent")              \
  X(kHeader, "header send (the MPI's call)")                               \
  X(kWaitPacked, "sender waits for its pack")                              \
  X(kCompletion, "completion calls (whole call)")                          \
  X(kPullIssue, "pull: open, wait ready word, unpack/copy enqueued")       \
  X(kPullWait, "pull: wait for copies and unpacks")                        \
  X(kAck, "acks sent")                                                     \
  X(kProgress, "segments returned (acks polled)")                          \
  X(kFinishLanded, "finish landed receives (zero-copy progress)")          \
  X(kZeroCheck, "send: zero-copy decision")                                \
  X(kTableAdd, "request table: op added")                                  \
  X(kReadyWait, "pull: wait for the sender's pack (ready word)")           \
  X(kGpuReadyWait, "pull: senders' packs waited for by the GPU (enqueue)") \
  X(kStageSend, "send: packed into host staging (waits for the GPU)")      \
  X(kAcquire, "lend: segment taken from the pool")                         \
  X(kLendRegion, "zero-copy: user buffer lent (handle, ack posted)")       \
  X(kPeek, "completion: receives tested")                                  \
  X(kOpen, "pull: sender's memory opened (header checked, handle)")        \
  X(kUnpackIssue, "pull: copies and kernels issued (host time)")           \
  X(kIssueItems, "pull: each message's copy or kernel planned")            \
  X(kLaunch, "kernels planned and launched (batched)")                     \
  X(kLaunchOnly, "kernels launched (batched, host time)")                  \
  X(kEnqueue, "enqueue: MPIX point-to-point call (whole)")                 \
  X(kEnqueuePrepare, "enqueue: checks, buffer classified")                 \
  X(kEnqueueStaging, "enqueue: operation made, staging taken")             \
  X(kEnqueueRequest, "enqueue: generalized request made")                  \
  X(kEnqueueStage, "enqueue: stream work issued (pack, copies)")           \
  X(kEnqueueMark, "enqueue: trigger position written")                     \
  X(kEnqueueSubmit, "enqueue: handed to the progress thread")              \
  X(kEnqueueWait, "enqueue: MPIX_Wait(all)_enqueue (whole)")               \
  X(kEnqueueWaitBatch, "enqueue: waits, copies, unpacks issued")           \
  X(kEnqueueWaitWords, "enqueue: the batch's waits issued")                \
  X(kEnqueueUnpacks, "enqueue: the batch's copies and unpacks issued")     \
  X(kEnqueueHeld, "enqueue: held sends' packs enqueued (one launch)")      \
  X(kEnqueueWaitTake, "enqueue: the wait's requests looked up")            \
  X(kEnqueueWaitDone, "enqueue: the wait's statuses set, requests freed")  \
  X(kEnqueueWaitDrop, "enqueue: the wait's requests dropped")              \
  X(kLaneJobs, "enqueue: a batch's layouts and addresses looked up")

enum Phase : int {
#define LOOM_STAT_ENUM(id, doc) id,
  LOOM_STAT_PHASES(LOOM_STAT_ENUM)
#undef LOOM_STAT_ENUM
      kPhases
};

extern std::atomic<bool> g_on;
void add(Phase p, int64_t ns);
void enable(bool on);
// One line per phase with calls, total, mean and median time (to stderr).
void print(int rank);

// Times a scope into phase p when stats are on.
class Scope {
 public:
  explicit Scope(Phase p) : p_(p), on_(g_on.load(std::memory_order_relaxed)) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (on_)
      add(p_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - t0_)
                  .count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Phase p_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace loom::stats
