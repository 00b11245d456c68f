// Device and mapped pinned pools: reuse, accounting back to zero, thread
// safety, stream-ordered release, and failure without a crash.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "pack/gpu_engine.hpp"
#include "pack/host_engine.hpp"
#include "pack/pools.hpp"

namespace loom::pack {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no usable CUDA device"

TEST(GpuPools, DeviceReuseAndAccounting) {
  SKIP_WITHOUT_GPU();
  DevicePool pool;
  auto a = pool.acquire(1000);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_GE(a.value().size, 1000u);
  EXPECT_EQ(a.value().ptr, a.value().dev);
  EXPECT_EQ(pool.bytes_in_use(), a.value().size);
  void* first = a.value().ptr;
  pool.release(a.value());
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_GT(pool.bytes_cached(), 0u);
  auto b = pool.acquire(900);  // same size class: the same buffer again
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b.value().ptr, first);
  ASSERT_EQ(cudaMemset(b.value().ptr, 1, 900), cudaSuccess);
  pool.release(b.value());
  pool.release_all();
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.bytes_cached(), 0u);
}

// Over the cache cap, the largest idle blocks go, not the one just returned:
// a size in steady use keeps its buffer after a one-off big message.
TEST(GpuPools, OverTheCapTheLargestIdleBlocksGo) {
  SKIP_WITHOUT_GPU();
  PoolOptions opt;
  opt.max_cached = (size_t{5} << 20) / 2;  // room for 2 MiB, not for 2 + 1
  Pool pool(Pool::Kind::kMappedHost, opt);
  auto big = pool.acquire(size_t{2} << 20);
  auto small = pool.acquire(size_t{1} << 20);
  ASSERT_TRUE(big.is_ok() && small.is_ok());
  void* small_ptr = small.value().ptr;
  pool.release(big.value());
  pool.release(small.value());  // 3 MiB would be over the cap
  EXPECT_LE(pool.bytes_cached(), opt.max_cached);
  EXPECT_EQ(pool.bytes_cached(), small.value().size);
  auto again = pool.acquire(size_t{1} << 20);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again.value().ptr, small_ptr) << "the block in steady use was freed";
  pool.release(again.value());
  pool.release_all();
  EXPECT_EQ(pool.bytes_cached(), 0u);
}

TEST(GpuPools, MappedHostIsWrittenByTheKernel) {
  SKIP_WITHOUT_GPU();
  PinnedPool pool;
  const Layout l = test::layout_of(test::hand_tree(), 5000, test::kHandExtent);
  auto g = GpuLayout::create(l);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  const test::Span sp = test::span_of(l);
  std::vector<unsigned char> huser(static_cast<size_t>(sp.hi));
  test::fill_pattern(huser, 5);
  void* duser = nullptr;
  ASSERT_EQ(cudaMalloc(&duser, huser.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(duser, huser.data(), huser.size(), cudaMemcpyHostToDevice), cudaSuccess);
  {
    auto lease_r = lease(pool, static_cast<size_t>(l.total));
    ASSERT_TRUE(lease_r.is_ok()) << lease_r.status().message();
    PoolLease buf = std::move(lease_r.value());
    ASSERT_NE(buf.dev(), nullptr);
    ASSERT_TRUE(gpu_pack_sync(g.value(), duser, buf.dev(), nullptr).is_ok());
    std::vector<unsigned char> want(static_cast<size_t>(l.total));
    host_pack(l, huser.data(), want.data());
    EXPECT_EQ(std::memcmp(buf.get(), want.data(), want.size()), 0);
    EXPECT_GE(pool.bytes_in_use(), want.size());
  }
  EXPECT_EQ(pool.bytes_in_use(), 0u);  // the lease went back
  EXPECT_EQ(cudaFree(duser), cudaSuccess);
  pool.release_all();
  EXPECT_EQ(pool.bytes_cached(), 0u);
}

TEST(GpuPools, ThreadSafe) {
  SKIP_WITHOUT_GPU();
  DevicePool dpool;
  PinnedPool hpool;
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<Pool*, PoolBlock>> held;
      for (int i = 0; i < 400; ++i) {
        if (held.size() < 4 && rng() % 2) {
          Pool* p = (i % 3 == 0) ? static_cast<Pool*>(&hpool) : static_cast<Pool*>(&dpool);
          auto b = p->acquire(1 + rng() % (1 << 20));
          if (b.is_ok()) held.emplace_back(p, b.value());
        } else if (!held.empty()) {
          held.back().first->release(held.back().second);
          held.pop_back();
        }
      }
      for (auto& [p, b] : held) p->release(b);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(dpool.bytes_in_use(), 0u);
  EXPECT_EQ(hpool.bytes_in_use(), 0u);
  dpool.release_all();
  hpool.release_all();
  EXPECT_EQ(dpool.bytes_cached() + hpool.bytes_cached(), 0u);
}

TEST(GpuPools, ReleaseAfterStreamWork) {
  SKIP_WITHOUT_GPU();
  DevicePool pool;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto a = pool.acquire(64 << 20);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_EQ(cudaMemsetAsync(a.value().ptr, 7, 64 << 20, s), cudaSuccess);
  ASSERT_TRUE(pool.release_after(a.value(), s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pool.bytes_in_use(), 0u);  // the event has completed
  auto b = pool.acquire(64 << 20);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b.value().ptr, a.value().ptr);
  pool.release(b.value());
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(GpuPools, FailureIsAnErrorNotACrash) {
  SKIP_WITHOUT_GPU();
  DevicePool pool;
  auto huge = pool.acquire(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), Err::kNoMemory);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing left for the next launch check
  auto small = pool.acquire(4096);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  pool.release(small.value());
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  PinnedPool hpool;
  auto hhuge = hpool.acquire(size_t{1} << 50);
  EXPECT_FALSE(hhuge.is_ok());
}

TEST(GpuPools, ReleaseAllFreesOutstanding) {
  SKIP_WITHOUT_GPU();
  DevicePool pool;
  auto a = pool.acquire(12345);
  ASSERT_TRUE(a.is_ok());
  pool.release_all();  // warns: one buffer still in use
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.bytes_cached(), 0u);
}

}  // namespace
}  // namespace loom::pack
