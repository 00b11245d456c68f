// The resident copy agent's protocol without a GPU: a thread plays the
// kernel (the same slot words and proxy_leave, memcpy for the block's copy), so the ring, the
// leaving and relaunching, and the race between a request and an agent that
// is leaving are tested on the host. The GPU test runs the kernel itself.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "pack/proxy_queue.hpp"

namespace loom::pack {
namespace {

struct HostSys {
  static uint64_t load(uint64_t* p) {
    return std::atomic_ref<uint64_t>(*p).load(std::memory_order_seq_cst);
  }
  static uint32_t load32(uint32_t* p) {
    return std::atomic_ref<uint32_t>(*p).load(std::memory_order_seq_cst);
  }
  static void store32(uint32_t* p, uint32_t v) {
    std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_seq_cst);
  }
  static void fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
};

// The kernel's loop (pack/cuda/proxy.cu) on a thread.
class ThreadAgent final : public ProxyAgent {
 public:
  explicit ThreadAgent(int fail_at_launch = -1) : fail_at_(fail_at_launch) {}
  ~ThreadAgent() override {
    if (t_.joinable()) t_.join();
  }
  ProxyCtl* ctl() override { return &ctl_; }
  ProxySlot* ring() override { return ring_.data(); }
  Status launch(uint64_t idle_ns) override {
    if (t_.joinable()) t_.join();  // the host launches only once the last has gone
    if (launches_++ == fail_at_) {
      failed_ = true;
      return Status(Err::kCuda, "launch refused (test)");
    }
    running_ = true;
    t_ = std::thread([this, idle_ns] { loop(idle_ns); });
    return Status::ok();
  }
  Run run() override {
    if (failed_) return Run::kFailed;
    return running_ ? Run::kRunning : Run::kExited;
  }
  std::string failure() override { return "test failure"; }
  int launches() const { return launches_; }

 private:
  void loop(uint64_t idle_ns) {
    uint64_t tail = HostSys::load(&ctl_.tail);
    auto last = std::chrono::steady_clock::now();
    for (;;) {
      // As the kernel: the slot's three words, then stop, then leaving.
      const ProxySlot& slot = ring_[tail % kProxyRing];
      uint64_t w[3];
      bool all = true;
      for (int i = 0; i < 3; ++i) {
        w[i] = HostSys::load(const_cast<uint64_t*>(&slot.w[i]));
        all = all && proxy_word_is(w[i], tail + 1);
      }
      if (all) {
        std::memcpy(reinterpret_cast<void*>(proxy_value(w[0])),
                    reinterpret_cast<const void*>(proxy_value(w[1])), proxy_value(w[2]));
        std::atomic_ref<uint64_t>(ctl_.tail).store(++tail, std::memory_order_seq_cst);
        last = std::chrono::steady_clock::now();
        continue;
      }
      if (HostSys::load32(&ctl_.stop)) break;
      if (std::chrono::steady_clock::now() - last > std::chrono::nanoseconds(idle_ns) &&
          proxy_leave<HostSys>(&ctl_, tail))
        break;
      std::this_thread::yield();
    }
    running_ = false;
  }
  ProxyCtl ctl_{};
  std::vector<ProxySlot> ring_ = std::vector<ProxySlot>(kProxyRing);
  std::thread t_;
  std::atomic<bool> running_{false}, failed_{false};
  int launches_ = 0;
  const int fail_at_;
};

std::vector<char> pattern(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(g());
  return v;
}

TEST(ProxyQueue, CopiesInOrderPastTheRing) {
  auto owned = std::make_unique<ThreadAgent>();
  ThreadAgent* agent = owned.get();
  ProxyQueue q(std::move(owned), 1'000'000'000);  // stays the whole test
  // More requests in flight than the ring holds: post waits for room.
  const int n = 5 * kProxyRing;
  std::vector<std::vector<char>> src, dst;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < n; ++i) {
    src.push_back(pattern(1 + i * 7 % 300, i));
    dst.emplace_back(src.back().size(), 0);
    auto t = q.post(dst.back().data(), src.back().data(), src.back().size());
    ASSERT_TRUE(t.is_ok());
    tickets.push_back(t.value());
  }
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(q.wait(tickets[i]).is_ok());
    EXPECT_EQ(dst[i], src[i]) << "request " << i;
  }
  EXPECT_EQ(agent->launches(), 1);
  EXPECT_EQ(q.launches(), 1u);
}

TEST(ProxyQueue, LeavesWhenIdleAndComesBack) {
  auto owned = std::make_unique<ThreadAgent>();
  ThreadAgent* agent = owned.get();
  ProxyQueue q(std::move(owned), 100'000);  // 100 us
  auto a = pattern(64, 1), b = std::vector<char>(64);
  ASSERT_TRUE(q.copy(b.data(), a.data(), a.size()).is_ok());
  EXPECT_EQ(a, b);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (agent->run() == ProxyAgent::Run::kRunning && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(agent->run(), ProxyAgent::Run::kExited) << "the agent never left";
  a = pattern(64, 2);
  ASSERT_TRUE(q.copy(b.data(), a.data(), a.size()).is_ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(q.launches(), 2u);
}

// An agent that tries to leave after every request: each post races with
// it. No request may be lost (a lost one hangs the wait), and an agent is
// launched again only once the last has gone.
TEST(ProxyQueue, NoRequestLostToAnAgentLeaving) {
  auto owned = std::make_unique<ThreadAgent>();
  ProxyQueue q(std::move(owned), 0);
  std::vector<std::thread> posters;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    posters.emplace_back([&q, &wrong, t] {
      for (int i = 0; i < 2000; ++i) {
        const uint64_t v = static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(i);
        uint64_t got = 0;
        if (!q.copy(&got, &v, sizeof v).is_ok() || got != v) wrong.fetch_add(1);
      }
    });
  for (auto& p : posters) p.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(q.launches(), 2u);
  EXPECT_EQ(q.rescues(), 0u);
}

TEST(ProxyQueue, RefusesWhatDoesNotFitAWord) {
  ProxyQueue q(std::make_unique<ThreadAgent>(), 1'000'000);
  int a = 5, b = 0;
  EXPECT_EQ(q.post(&b, &a, size_t{1} << 48).status().code(), Err::kUnsupported);
  EXPECT_EQ(q.post(reinterpret_cast<void*>(uintptr_t{1} << 50), &a, 4).status().code(),
            Err::kUnsupported);
  EXPECT_TRUE(q.copy(&b, &a, sizeof a).is_ok());  // and goes on
  EXPECT_EQ(b, 5);
}

TEST(ProxyQueue, AFailedLaunchIsAnErrorNotAHang) {
  ProxyQueue q(std::make_unique<ThreadAgent>(/*fail_at_launch=*/0), 1'000'000);
  int a = 5, b = 0;
  EXPECT_EQ(q.copy(&b, &a, sizeof a).code(), Err::kCuda);
  EXPECT_EQ(q.copy(&b, &a, sizeof a).code(), Err::kCuda);  // and it stays failed
  EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace loom::pack
