// CUDA IPC segments: cudaMalloc'd device memory, exported with
// cudaIpcGetMemHandle once per segment, opened by peers with peer access
// enabled lazily (two GPUs over NVLink, or the same GPU from another process).
#include <cuda_runtime_api.h>

#include <cstring>

#include "transport/peer_memory.hpp"

namespace loom::transport {
namespace {

Status cuda_err(cudaError_t e, const char* what) {
  cudaGetLastError();
  return Status(Err::kCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

class IpcPeerMemory final : public PeerMemory {
 public:
  ~IpcPeerMemory() override {
    unmap_all();
    free_all();
  }
  const char* name() const override { return "CUDA IPC"; }

 protected:
  Result<Segment> allocate(size_t bytes) override {
    static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(PeerHandle::bytes));
    Segment s;
    s.size = bytes;
    s.handle.size = bytes;
    cudaError_t e = cudaMalloc(&s.ptr, bytes);
    if (e != cudaSuccess) return cuda_err(e, "IPC segment");
    cudaIpcMemHandle_t h;
    e = cudaIpcGetMemHandle(&h, s.ptr);
    if (e != cudaSuccess) {
      cudaFree(s.ptr);
      return cuda_err(e, "cudaIpcGetMemHandle");
    }
    std::memcpy(s.handle.bytes, &h, sizeof(h));
    return s;
  }
  void deallocate(const Segment& s) override {
    if (cudaFree(s.ptr) != cudaSuccess) cudaGetLastError();
  }
  Result<void*> map(const PeerHandle& ph) override {
    cudaIpcMemHandle_t h;
    std::memcpy(&h, ph.bytes, sizeof(h));
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) return cuda_err(e, "cudaIpcOpenMemHandle");
    return p;
  }
  void unmap(void* p, const PeerHandle&) override {
    if (cudaIpcCloseMemHandle(p) != cudaSuccess) cudaGetLastError();
  }
};

}  // namespace

Result<std::unique_ptr<PeerMemory>> make_ipc_peer_memory() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return Status(Err::kUnsupported, "no GPU");
  }
  return std::unique_ptr<PeerMemory>(std::make_unique<IpcPeerMemory>());
}

}  // namespace loom::transport
