// The collectives suite (tests/mpi/coll_cases.hpp) on real device memory:
// "device" buffers are cudaMalloc'd (inputs copied up, results down),
// "host" ones plain host memory. Run by ctest once per LOOM_METHOD on 2 and
// 4 ranks; skips where no GPU is usable.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "coll/nccl_engine.hpp"
#include "coll_cases.hpp"

namespace loom::test::coll {
namespace {

class Gpu final : public Backend {
 public:
  bool usable(std::string* why) override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      cudaGetLastError();
      *why = "no GPU";
      return false;
    }
    cudaSetDevice(world_rank() % n);
    return true;
  }
  void* alloc(size_t bytes, bool device) override {
    if (!device) return std::malloc(bytes);
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess)
      ADD_FAILURE() << "cudaMalloc of " << bytes << " bytes";
    return p;
  }
  void release(void* p, bool device) override {
    if (device)
      cudaFree(p);
    else
      std::free(p);
  }
  void put(void* dst, const void* src, size_t n, bool device) override {
    if (!device) {
      std::memcpy(dst, src, n);
      return;
    }
    EXPECT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), cudaSuccess);
    cudaDeviceSynchronize();  // a pageable copy may still be landing when cudaMemcpy returns
  }
  void get(void* dst, const void* src, size_t n, bool device) override {
    if (!device) {
      std::memcpy(dst, src, n);
      return;
    }
    cudaDeviceSynchronize();
    EXPECT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  bool device_path() override { return true; }
};

}  // namespace

Backend& backend() {
  static Gpu b;
  return b;
}

// LOOM_COLL_METHOD=nccl (ctest gpu.coll.nccl.*): a communicator whose ranks
// each have a GPU of their own runs its collectives on device buffers
// through NCCL (the engine's call count proves it), with the MPI's
// results; where ranks share a GPU NCCL is declined and the calls still
// give those results. Each rank alone in a communicator has its GPU to
// itself, so one GPU runs NCCL too.
void nccl_round(MPI_Comm comm, bool expect_nccl) {
  int me = 0, n = 0;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  const int count = 1 << 16;  // 256 KiB of floats, above LOOM_COLL_NODE_MIN
  std::vector<float> h(static_cast<size_t>(count) * n), want(h.size()), got(h.size());
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), h.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), h.size() * sizeof(float)), cudaSuccess);
  auto up = [&](float* d, const std::vector<float>& v) {
    cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  };
  auto down = [&](const float* d) {
    cudaDeviceSynchronize();
    cudaMemcpy(got.data(), d, got.size() * sizeof(float), cudaMemcpyDeviceToHost);
  };
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>((i * 7 + me * 13) % 101);
  const uint64_t calls0 = loom::coll::nccl::calls();
  int ncalls = 0;
  // Allreduce (sum), against the MPI's own on host memory.
  up(a, h);
  ASSERT_EQ(MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  ++ncalls;
  PMPI_Allreduce(h.data(), want.data(), count, MPI_FLOAT, MPI_SUM, comm);
  down(b);
  for (int i = 0; i < count; ++i) ASSERT_EQ(got[i], want[i]) << "allreduce " << i;
  // Allreduce (max) in place.
  up(a, h);
  ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, a, count, MPI_FLOAT, MPI_MAX, comm), MPI_SUCCESS);
  ++ncalls;
  PMPI_Allreduce(h.data(), want.data(), count, MPI_FLOAT, MPI_MAX, comm);
  down(a);
  for (int i = 0; i < count; ++i) ASSERT_EQ(got[i], want[i]) << "allreduce max " << i;
  // Bcast from the last rank.
  up(a, h);
  ASSERT_EQ(MPI_Bcast(a, count, MPI_FLOAT, n - 1, comm), MPI_SUCCESS);
  ++ncalls;
  want = h;
  PMPI_Bcast(want.data(), count, MPI_FLOAT, n - 1, comm);
  down(a);
  for (int i = 0; i < count; ++i) ASSERT_EQ(got[i], want[i]) << "bcast " << i;
  // Allgather, Alltoall, Reduce_scatter_block, Reduce.
  up(a, h);
  ASSERT_EQ(MPI_Allgather(a, count, MPI_FLOAT, b, count, MPI_FLOAT, comm), MPI_SUCCESS);
  ++ncalls;
  PMPI_Allgather(h.data(), count, MPI_FLOAT, want.data(), count, MPI_FLOAT, comm);
  down(b);
  ASSERT_TRUE(got == want) << "allgather";
  const int each = count / n;
  ASSERT_EQ(MPI_Alltoall(a, each, MPI_FLOAT, b, each, MPI_FLOAT, comm), MPI_SUCCESS);
  ++ncalls;
  PMPI_Alltoall(h.data(), each, MPI_FLOAT, want.data(), each, MPI_FLOAT, comm);
  down(b);
  for (int i = 0; i < each * n; ++i) ASSERT_EQ(got[i], want[i]) << "alltoall " << i;
  ASSERT_EQ(MPI_Reduce_scatter_block(a, b, each, MPI_FLOAT, MPI_SUM, comm), MPI_SUCCESS);
  ++ncalls;
  PMPI_Reduce_scatter_block(h.data(), want.data(), each, MPI_FLOAT, MPI_SUM, comm);
  down(b);
  for (int i = 0; i < each; ++i) ASSERT_EQ(got[i], want[i]) << "reduce_scatter_block " << i;
  ASSERT_EQ(MPI_Reduce(a, b, count, MPI_FLOAT, MPI_MIN, 0, comm), MPI_SUCCESS);
  ++ncalls;
  PMPI_Reduce(h.data(), want.data(), count, MPI_FLOAT, MPI_MIN, 0, comm);
  if (me == 0) {
    down(b);
    for (int i = 0; i < count; ++i) ASSERT_EQ(got[i], want[i]) << "reduce " << i;
  }
  EXPECT_EQ(loom::coll::nccl::calls() - calls0, expect_nccl ? static_cast<uint64_t>(ncalls) : 0u);
  cudaFree(a);
  cudaFree(b);
}

// Why an NCCL test cannot run here ("" where it can).
std::string nccl_test_skip() {
  const char* m = std::getenv("LOOM_COLL_METHOD");
  if (!m || std::string(m) != "nccl") return "LOOM_COLL_METHOD is not nccl";
  std::string why;
  if (!backend().usable(&why) || !loom::coll::nccl::available(&why)) return why;
  return "";
}

TEST(NcclEngine, RunsWhereEachRankHasItsGpu) {
  if (const std::string why = nccl_test_skip(); !why.empty()) GTEST_SKIP() << why;
  int me = 0, size = 0, gpus = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cudaGetDeviceCount(&gpus);
  MPI_Comm alone;
  MPI_Comm_split(MPI_COMM_WORLD, me, 0, &alone);
  nccl_round(alone, true);
  MPI_Comm_free(&alone);
  // The whole world: NCCL where every rank has a GPU of its own (rank % gpus).
  nccl_round(MPI_COMM_WORLD, size <= gpus);
}

// A nonblocking call on NCCL leaves the legacy default stream free: rank 0
// starts MPI_Ialltoall, then copies on stream 0 and only then sends rank 1
// the token rank 1 waits for before its own MPI_Ialltoall. Were NCCL's
// kernel (waiting for rank 1) on a blocking stream, rank 0's copy would wait
// for it and neither rank could go on; MPI says this program completes.
TEST(NcclEngine, NonblockingLeavesTheDefaultStreamFree) {
  if (const std::string why = nccl_test_skip(); !why.empty()) GTEST_SKIP() << why;
  int me = 0, size = 0, gpus = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cudaGetDeviceCount(&gpus);
  if (size < 2 || size > gpus) GTEST_SKIP() << "needs a GPU of its own for each rank";
  const int each = 1 << 16;  // floats to each rank
  const size_t bytes = sizeof(float) * static_cast<size_t>(each) * size;
  std::vector<float> h(static_cast<size_t>(each) * size), got(h.size()), want(h.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(me * 1000003 + i);
  void *a = nullptr, *b = nullptr, *spare = nullptr;
  ASSERT_EQ(cudaMalloc(&a, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&spare, 64), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, h.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  cudaDeviceSynchronize();
  // A first nonblocking call on a communicator synchronises its ranks (the
  // twin communicator, NCCL's): made here, before the test proper.
  MPI_Request req = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Ialltoall(a, each, MPI_FLOAT, b, each, MPI_FLOAT, MPI_COMM_WORLD, &req),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_SUCCESS);
  const uint64_t calls0 = loom::coll::nccl::calls();
  Watchdog::get().note("NcclEngine.NonblockingLeavesTheDefaultStreamFree");
  int token = 7;
  if (me == 1) MPI_Recv(&token, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  ASSERT_EQ(MPI_Ialltoall(a, each, MPI_FLOAT, b, each, MPI_FLOAT, MPI_COMM_WORLD, &req),
            MPI_SUCCESS);
  if (me == 0) {
    char small[64];
    ASSERT_EQ(cudaMemcpy(small, spare, sizeof small, cudaMemcpyDeviceToHost), cudaSuccess);
    MPI_Send(&token, 1, MPI_INT, 1, 99, MPI_COMM_WORLD);
  }
  ASSERT_EQ(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(loom::coll::nccl::calls() - calls0, 1u) << "NCCL did not take MPI_Ialltoall";
  PMPI_Alltoall(h.data(), each, MPI_FLOAT, want.data(), each, MPI_FLOAT, MPI_COMM_WORLD);
  ASSERT_EQ(cudaMemcpy(got.data(), b, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(got == want) << "alltoall";
  cudaFree(a);
  cudaFree(b);
  cudaFree(spare);
}

}  // namespace loom::test::coll
