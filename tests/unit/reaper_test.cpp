// util/reaper: tasks run in order off the caller's thread, and a caller is
// never held up by a task that waits for it (the pools' frees, which wait
// until the device is idle, while a stream waits for the freeing thread).
#include "util/reaper.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace loom {
namespace {

TEST(Reaper, RunsInOrderOffTheCallersThread) {
  Reaper r;
  std::vector<int> order;
  std::atomic<int> on_caller{0};
  const auto me = std::this_thread::get_id();
  for (int i = 0; i < 100; ++i)
    r.push([&, i] {
      order.push_back(i);  // one task at a time: no lock needed
      if (std::this_thread::get_id() == me) on_caller.fetch_add(1);
    });
  r.drain();
  EXPECT_EQ(r.pending(), 0u);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(on_caller.load(), 0);
}

// The task waits for something the caller does only after push() returns:
// push must not wait for it, as a free would wait for a stream that waits
// for the freeing thread.
TEST(Reaper, APushNeverWaitsForABlockedTask) {
  Reaper r;
  std::atomic<bool> go{false}, ran{false};
  r.push([&] {
    while (!go.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    ran = true;
  });
  r.push([] {});  // queued behind the blocked one: still no wait here
  EXPECT_EQ(r.pending(), 2u);
  EXPECT_FALSE(ran.load());
  go = true;
  r.drain();
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(r.pending(), 0u);
}

TEST(Reaper, DestructionRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    Reaper r;
    for (int i = 0; i < 10; ++i)
      r.push([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ran.fetch_add(1);
      });
  }
  EXPECT_EQ(ran.load(), 10);
}

TEST(Reaper, DrainWithNothingQueuedReturns) {
  Reaper r;
  r.drain();
  EXPECT_EQ(r.pending(), 0u);
}

}  // namespace
}  // namespace loom
