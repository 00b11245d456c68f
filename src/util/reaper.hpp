// Runs tasks in order on a thread of its own, for calls that may block for
// a long time where the caller must not: cudaFree and cudaFreeHost wait
// until the device is idle, and a thread of Loom's that a GPU stream waits
// for (or an application thread inside an MPI call that another rank's
// stream waits for) would then wait for itself (src/pack/pools.hpp). Nothing
// waits for the reaper but drain().
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace loom {

class Reaper {
 public:
  Reaper() = default;
  ~Reaper();  // runs what is queued, then joins
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Queues `task`; never blocks on the tasks before it.
  void push(std::function<void()> task);
  // Returns once every task pushed before the call has run.
  void drain();
  // Tasks pushed and not yet done.
  size_t pending() const;

 private:
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> tasks_;
  size_t pending_ = 0;
  bool stop_ = false;
  std::thread thread_;  // started by the first push
};

}  // namespace loom
