// The node engine's reducer on the GPU: the fold kernels of reduce_gpu.hpp
// on a stream of its own, which (created blocking) starts after work the
// application queued on the legacy default stream.
#include <cuda_runtime_api.h>

#include "coll/node_engine.hpp"
#include "coll/reduce_gpu.hpp"
#include "pack/cuda/check.hpp"

namespace loom::coll {
namespace {

class GpuReducer final : public Reducer {
 public:
  explicit GpuReducer(cudaStream_t s) : stream_(s) {}
  ~GpuReducer() override { cudaStreamDestroy(stream_); }
  Status reduce_to(ReduceOp op, Basic b, const void* const* in, int n, void* const* outs, int nout,
                   size_t count) override {
    LOOM_TRY(gpu_reduce_to(op, b, in, n, outs, nout, count, stream_));
    LOOM_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::ok();
  }

 private:
  cudaStream_t stream_;
};

}  // namespace

Result<std::unique_ptr<Reducer>> make_gpu_reducer() {
  cudaStream_t s = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamDefault); e != cudaSuccess) {
    cudaGetLastError();
    return Status(Err::kCuda, std::string("reducer stream: ") + cudaGetErrorString(e));
  }
  return std::unique_ptr<Reducer>(std::make_unique<GpuReducer>(s));
}

}  // namespace loom::coll
