// The stream engine's queue machinery without MPI or a GPU: the emulated
// stream, the cyclic flag comparison, and a channel's trigger and release
// words driven by a stand-in for the progress thread, past the end of the
// release-word ring many times.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "stream/engine.hpp"
#include "stream/lane.hpp"

namespace loom::stream {
namespace {

TEST(StreamLane, ReachedIsCyclic) {
  EXPECT_TRUE(reached(5, 5));
  EXPECT_TRUE(reached(6, 5));
  EXPECT_FALSE(reached(4, 5));
  EXPECT_TRUE(reached(2, 0xfffffffeu));  // past the wrap
  EXPECT_FALSE(reached(0xfffffffeu, 2));
}

TEST(StreamLane, HostStreamRunsInOrder) {
  HostStream s;
  std::vector<int> seen;
  for (int i = 0; i < 1000; ++i) s.push([&seen, i] { seen.push_back(i); });
  s.synchronize();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[i], i);
}

// The host enqueues n operations (work, trigger, wait) far ahead of the
// stream; a progress thread releases each once the stream's position has
// reached its trigger. The stream must run each operation's "after" work
// only once it is released, in order, while the release words are reused.
TEST(StreamLane, ChannelTriggersAndReleasesInOrderPastTheRing) {
  HostStream hs;
  auto made = Channel::create(std::shared_ptr<Lane>(make_host_lane(&hs)));
  ASSERT_TRUE(made.is_ok());
  auto ch = made.value();
  const int n = 3 * Channel::kSlots + 7;
  struct Pending {
    uint32_t start;
    Slot slot;
  };
  std::mutex mu;
  std::deque<Pending> queue;
  std::atomic<int> released{0}, bad{0};
  std::vector<int> order;  // written by the stream only
  std::thread progress([&] {
    for (int k = 0; k < n; ++k) {
      Pending p{};
      for (;;) {
        std::lock_guard<std::mutex> lk(mu);
        if (!queue.empty()) {
          p = queue.front();
          queue.pop_front();
          break;
        }
      }
      while (!reached(ch->position(), p.start)) std::this_thread::yield();
      released.store(k + 1);
      ch->release(p.slot);
    }
  });
  for (int k = 0; k < n; ++k) {
    std::lock_guard<std::mutex> lk(ch->mu());
    hs.push([&order, k] { order.push_back(2 * k); });
    auto start = ch->mark();
    ASSERT_TRUE(start.is_ok());
    const Slot slot = ch->take();
    {
      std::lock_guard<std::mutex> q(mu);
      queue.push_back({start.value(), slot});
    }
    ASSERT_TRUE(ch->wait(slot).is_ok());
    hs.push([&order, &released, &bad, k] {
      if (released.load() < k + 1) bad.fetch_add(1);  // went on before its release
      order.push_back(2 * k + 1);
    });
  }
  hs.synchronize();
  progress.join();
  EXPECT_EQ(bad.load(), 0);
  ASSERT_EQ(static_cast<int>(order.size()), 2 * n);
  for (int i = 0; i < 2 * n; ++i) ASSERT_EQ(order[i], i);
  EXPECT_FALSE(ch->busy());
}

}  // namespace
}  // namespace loom::stream
