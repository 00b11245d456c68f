// The free gate (pack/free_gate.hpp): CUDA frees held back while a stream may
// wait for a host thread. The logic with a recording free function (runs
// everywhere), then the hazard itself on a GPU: a pool releasing past its cap
// on a thread a stream waits for, while a channel is open, must not wait for
// that stream (cudaFreeHost / cudaFree would, until the device is idle).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu_test_util.hpp"
#include "pack/free_gate.hpp"
#include "pack/gpu_engine.hpp"
#include "pack/pools.hpp"

namespace loom::pack {
namespace {

std::mutex freed_mu;
std::vector<void*> freed;

void record(FreeGate::Kind, void* p, int) {
  std::lock_guard<std::mutex> lk(freed_mu);
  freed.push_back(p);
}

size_t freed_count() {
  std::lock_guard<std::mutex> lk(freed_mu);
  return freed.size();
}

void* addr(uintptr_t i) {
  return reinterpret_cast<void*>(i * 4096);
}

TEST(FreeGate, HoldsFreesWhileAChannelLives) {
  freed.clear();
  FreeGate g(record);
  EXPECT_TRUE(g.open());
  g.release(FreeGate::Kind::kHost, addr(1), -1);  // no channel: at once
  EXPECT_EQ(freed_count(), 1u);
  g.release(FreeGate::Kind::kHost, nullptr, -1);  // nothing to free
  EXPECT_EQ(freed_count(), 1u);
  g.channel_opened();
  g.channel_opened();
  EXPECT_FALSE(g.open());
  g.release(FreeGate::Kind::kDevice, addr(2), 0);
  g.release(FreeGate::Kind::kHost, addr(3), -1);
  EXPECT_EQ(freed_count(), 1u);
  EXPECT_EQ(g.held(), 2u);
  g.channel_closed();  // one left: still shut
  EXPECT_FALSE(g.open());
  EXPECT_EQ(freed_count(), 1u);
  g.channel_closed();  // the last one out frees what was held, in order
  EXPECT_TRUE(g.open());
  EXPECT_EQ(g.held(), 0u);
  ASSERT_EQ(freed_count(), 3u);
  EXPECT_EQ(freed[1], addr(2));
  EXPECT_EQ(freed[2], addr(3));
}

TEST(FreeGate, DrainFreesWhateverChannelsRemain) {
  freed.clear();
  FreeGate g(record);
  g.channel_opened();
  g.release(FreeGate::Kind::kHost, addr(4), -1);
  EXPECT_EQ(freed_count(), 0u);
  g.drain();  // finalize: the engine stopped
  EXPECT_EQ(freed_count(), 1u);
  EXPECT_TRUE(g.open());
  g.release(FreeGate::Kind::kHost, addr(5), -1);  // after the drain: at once
  EXPECT_EQ(freed_count(), 2u);
}

// Frees racing channels that open and close: every address freed exactly
// once, and no channel opened while a free ran (a free takes a while, as
// cudaFree does: the recorder looks at a counter the test keeps beside the
// gate when it starts and again when it ends).
std::atomic<int> live{0};
std::atomic<int> freed_while_shut{0};
void record_checked(FreeGate::Kind k, void* p, int d) {
  const int before = live.load();
  for (int i = 0; i < 20; ++i) std::this_thread::yield();
  if (before > 0 || live.load() > 0) freed_while_shut.fetch_add(1);
  record(k, p, d);
}

TEST(FreeGate, FreesAndChannelsRacing) {
  freed.clear();
  live = 0;
  freed_while_shut = 0;
  FreeGate g(record_checked);
  constexpr int kFrees = 20000;
  std::thread opener([&] {
    for (int i = 0; i < 2000; ++i) {
      g.channel_opened();
      live.fetch_add(1);
      std::this_thread::yield();
      live.fetch_sub(1);  // before the gate opens again
      g.channel_closed();
    }
  });
  std::vector<std::thread> freers;
  for (int t = 0; t < 3; ++t)
    freers.emplace_back([&, t] {
      for (int i = 0; i < kFrees; ++i)
        g.release(FreeGate::Kind::kHost, addr(1 + t * kFrees + i), -1);
    });
  opener.join();
  for (auto& t : freers) t.join();
  EXPECT_EQ(g.held(), 0u);
  EXPECT_EQ(freed_count(), size_t{3} * kFrees);
  EXPECT_EQ(freed_while_shut.load(), 0);
  std::sort(freed.begin(), freed.end());
  EXPECT_EQ(std::adjacent_find(freed.begin(), freed.end()), freed.end());
}

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no usable CUDA device"

// A stream waits for a word that a thread writes only after releasing
// blocks past the pool's cap and freeing a buffer through the gate; a
// channel of the stream engine is open, as when the stream progress thread
// gives staging back. Nothing may wait for the stream: the blocks stay
// cached (reusable) past the cap, the free is held back. Once the channel
// goes, the held free runs and the next release trims the cache.
void release_while_a_stream_waits(Pool::Kind kind) {
  PoolOptions opt;
  opt.max_cached = size_t{1} << 20;
  Pool pool(kind, opt);
  auto small = pool.acquire(size_t{512} << 10);
  auto big = pool.acquire(size_t{4} << 20);  // bigger than the whole cache
  ASSERT_TRUE(small.is_ok() && big.is_ok()) << big.status().message();
  const bool device = kind == Pool::Kind::kDevice;
  void* extra = nullptr;  // freed through the gate
  ASSERT_EQ(device ? cudaMalloc(&extra, 1 << 20) : cudaHostAlloc(&extra, 1 << 20, 0), cudaSuccess);
  PinnedPool words;
  auto w = words.acquire(64);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  auto* word = static_cast<std::atomic<uint32_t>*>(w.value().ptr);
  word->store(0);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto hold = std::make_unique<FreeGateHold>();
  const uint32_t* dev = static_cast<const uint32_t*>(w.value().dev);
  const uint32_t one = 1;
  ASSERT_TRUE(gpu_wait_many(&dev, &one, 1, s).is_ok());  // the stream waits for the thread
  std::atomic<bool> returned{false};
  std::thread t([&] {
    pool.release(small.value());
    pool.release(big.value());  // past the cap: kept while the gate is shut
    FreeGate::get().release(device ? FreeGate::Kind::kDevice : FreeGate::Kind::kHost, extra, 0);
    returned = true;
    word->store(1);  // the stream goes on
  });
  const auto t0 = std::chrono::steady_clock::now();
  while (!returned && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool ok = returned.load();
  if (!ok) word->store(1);  // a release blocked: let the stream end the wait for it
  t.join();
  ASSERT_TRUE(ok) << "a release while a channel is open waited for the stream";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(FreeGate::get().held(), 1u);  // the extra buffer
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_GT(pool.bytes_cached(), opt.max_cached);
  auto again = pool.acquire(size_t{4} << 20);  // the big block, reused
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again.value().ptr, big.value().ptr);
  pool.release(again.value());
  hold.reset();  // the last channel goes: what was held is freed
  EXPECT_EQ(FreeGate::get().held(), 0u);
  auto c = pool.acquire(4096);
  ASSERT_TRUE(c.is_ok());
  pool.release(c.value());  // open: the cache back under its cap
  EXPECT_LE(pool.bytes_cached(), opt.max_cached);
  words.release(w.value());
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(FreeGateGpu, PinnedReleaseDoesNotWaitForAWaitingStream) {
  SKIP_WITHOUT_GPU();
  release_while_a_stream_waits(Pool::Kind::kMappedHost);
}

TEST(FreeGateGpu, DeviceReleaseDoesNotWaitForAWaitingStream) {
  SKIP_WITHOUT_GPU();
  release_while_a_stream_waits(Pool::Kind::kDevice);
}

}  // namespace
}  // namespace loom::pack
