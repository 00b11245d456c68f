// The resident copy agent's kernel: copies of every size and alignment
// between device buffers and mapped pinned memory, equal to the source with
// the bytes around the destination untouched; it leaves when idle (so
// cudaDeviceSynchronize returns) and comes back for the next copy.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "pack/gpu_engine.hpp"
#include "pack/proxy_queue.hpp"

namespace loom::pack {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no usable CUDA device"

TEST(GpuProxy, CopiesEverySizeAndAlignment) {
  SKIP_WITHOUT_GPU();
  auto q = make_gpu_proxy(1'000'000'000);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  const size_t cap = 1 << 20;
  char *a = nullptr, *b = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), cap + 64), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), cap + 64), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), cap + 64, cudaHostAllocMapped),
            cudaSuccess);
  std::vector<char> src(cap + 64), want(cap + 64), got(cap + 64);
  std::mt19937 g(7);
  for (char& c : src) c = static_cast<char>(g());
  ASSERT_EQ(cudaMemcpy(a, src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);  // its DMA may still land
  const size_t sizes[] = {1, 3, 15, 16, 17, 100, 4096, 65535, 65536, 65537, 300001, cap - 1, cap};
  for (size_t n : sizes)
    for (size_t so : {0, 1, 8}) {
      for (size_t d : {0, 3, 16}) {
        ASSERT_EQ(cudaMemset(b, 0x5a, cap + 64), cudaSuccess);
        // The agent is not ordered after the legacy stream (as documented):
        // the memset must be done before the copy is posted.
        ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
        ASSERT_TRUE(q.value()->copy(b + d, a + so, n).is_ok());
        ASSERT_EQ(cudaMemcpy(got.data(), b, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        want.assign(want.size(), 0x5a);
        std::copy(src.begin() + so, src.begin() + so + n, want.begin() + d);
        ASSERT_EQ(got, want) << n << " bytes, source +" << so << ", destination +" << d;
      }
      // Device to mapped pinned host memory, read at once by the host.
      std::memset(pinned, 0x33, cap + 64);
      ASSERT_TRUE(q.value()->copy(pinned + 5, a + so, n).is_ok());
      ASSERT_EQ(0, std::memcmp(pinned + 5, src.data() + so, n)) << n << " bytes to pinned";
      ASSERT_EQ(pinned[4], 0x33);
      ASSERT_EQ(pinned[5 + n], 0x33);
    }
  EXPECT_EQ(q.value()->launches(), 1u);
  EXPECT_EQ(q.value()->rescues(), 0u);
  q.value().reset();
  cudaFree(a);
  cudaFree(b);
  cudaFreeHost(pinned);
}

// The agent stays resident across copies: a source that changed in between
// must be read anew (not from a line the agent's SM cached before).
TEST(GpuProxy, ReadsASourceThatChangedSince) {
  SKIP_WITHOUT_GPU();
  auto q = make_gpu_proxy(1'000'000'000);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  const size_t kBytes = 1 << 20;
  int *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), kBytes), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int> h(kBytes / sizeof(int));
  for (int round = 0; round < 20; ++round) {
    ASSERT_EQ(cudaMemsetAsync(a, round, kBytes, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_TRUE(q.value()->copy(b, a, kBytes).is_ok());
    ASSERT_EQ(cudaMemcpyAsync(h.data(), b, kBytes, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (int v : h) ASSERT_EQ(v, round * 0x01010101) << "round " << round;
  }
  EXPECT_EQ(q.value()->launches(), 1u);
  q.value().reset();
  cudaStreamDestroy(s);
  cudaFree(a);
  cudaFree(b);
}

TEST(GpuProxy, LeavesWhenIdleSoDeviceSynchronizeReturns) {
  SKIP_WITHOUT_GPU();
  auto q = make_gpu_proxy(200'000);  // 200 us
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  int *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), 4096), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), 4096), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(cudaMemset(a, round + 1, 4096), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(q.value()->copy(b, a, 4096).is_ok());
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // waits for the agent to leave
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 1000.0);
    std::vector<int> h(1024);
    ASSERT_EQ(cudaMemcpy(h.data(), b, 4096, cudaMemcpyDeviceToHost), cudaSuccess);
    const int want = (round + 1) * 0x01010101;
    for (int v : h) ASSERT_EQ(v, want);
  }
  EXPECT_EQ(q.value()->launches(), 3u);
  EXPECT_EQ(q.value()->rescues(), 0u);
  q.value().reset();
  cudaFree(a);
  cudaFree(b);
}

// Many threads posting while the agent keeps leaving (no idle time at all).
TEST(GpuProxy, ThreadsPostingWhileItLeaves) {
  SKIP_WITHOUT_GPU();
  auto q = make_gpu_proxy(0);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  uint64_t* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), 8 * 4), cudaSuccess);
  uint64_t* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 8 * 8, cudaHostAllocMapped),
            cudaSuccess);
  std::vector<std::thread> ts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        pinned[t] = static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(i);
        if (!q.value()->copy(dev + t, pinned + t, 8).is_ok() ||
            !q.value()->copy(pinned + 4 + t, dev + t, 8).is_ok() || pinned[4 + t] != pinned[t])
          wrong.fetch_add(1);
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(q.value()->rescues(), 0u);
  q.value().reset();
  cudaFree(dev);
  cudaFreeHost(pinned);
}

}  // namespace
}  // namespace loom::pack
