// The collectives suite (tests/mpi/coll_cases.hpp) on real device memory:
// "device" buffers are cudaMalloc'd (inputs copied up, results down),
// "host" ones plain host memory. Run by ctest once per LOOM_METHOD on 2 and
// 4 ranks; skips where no GPU is usable.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

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

}  // namespace loom::test::coll
