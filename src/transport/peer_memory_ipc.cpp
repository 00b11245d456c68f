// CUDA IPC segments: cudaMalloc'd device memory, exported with
// cudaIpcGetMemHandle once per segment, opened by peers with peer access
// enabled lazily (two GPUs over NVLink, or the same GPU from another process).
#include <cuda.h>  // attribute names only: the driver is reached through driver_entry
#include <cuda_runtime_api.h>

#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

#include "pack/free_gate.hpp"
#include "transport/driver_entry.hpp"
#include "transport/memtype.hpp"
#include "transport/peer_memory.hpp"

namespace loom::transport {
namespace {

Status cuda_err(cudaError_t e, const char* what) {
  cudaGetLastError();
  return Status(Err::kCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

// cuPointerGetAttributes from the driver the CUDA runtime loaded (linking
// libcuda would make Loom unloadable on machines without a GPU driver).
using PointerAttrsFn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);
PointerAttrsFn pointer_attrs() {
  static const auto fn = reinterpret_cast<PointerAttrsFn>(driver_entry("cuPointerGetAttributes"));
  return fn;
}

class IpcPeerMemory final : public PeerMemory {
 public:
  ~IpcPeerMemory() override {
    unmap_all();
    free_all();
  }
  const char* name() const override { return "CUDA IPC"; }

  // The allocation holding p, exported once: its handle is cached by base
  // address and the driver's buffer id, which changes when the address is
  // freed and allocated again. Peers map it with open_user(), which drops a
  // mapping of freed memory that gets in the way, so a reused address is
  // lent again like any other.
  Result<Exported> export_user(const void* p, size_t bytes, bool whole_pages) override {
    PointerAttrsFn attrs = pointer_attrs();
    if (!attrs) return Status(Err::kUnsupported, "no cuPointerGetAttributes");
    CUdeviceptr base = 0;
    size_t size = 0;
    unsigned long long id = 0;
    int ipc_ok = 0;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
    void* out[] = {&base, &size, &id, &ipc_ok};
    if (attrs(4, which, out, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS || base == 0)
      return Status(Err::kUnsupported, "not a device allocation");
    // cudaMallocAsync pools, VMM and managed memory have no legacy IPC handle.
    if (!ipc_ok) return Status(Err::kUnsupported, "allocation cannot be shared by CUDA IPC");
    const uint64_t offset = reinterpret_cast<uintptr_t>(p) - static_cast<uintptr_t>(base);
    if (offset + bytes > size) return Status(Err::kInvalidArg, "buffer past its allocation");
    // The collectives keep several of a lender's buffers mapped through one
    // call: those must be whole 2 MiB pages, since a peer's mapping covers
    // whole pages and small allocations share them.
    constexpr uint64_t kPage = uint64_t{2} << 20;
    if (whole_pages && (base % kPage != 0 || size % kPage != 0))
      return Status(Err::kUnsupported, "allocation shares its 2 MiB pages");
    Exported e;
    e.offset = offset;
    e.base = base;
    std::lock_guard<std::mutex> lk(export_mu_);
    auto it = lent_.find(base);
    if (it != lent_.end() && it->second.id == id) {
      e.handle = it->second.handle;
      return e;
    }
    cudaIpcMemHandle_t h;
    const cudaError_t err = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
    if (err != cudaSuccess) return cuda_err(err, "cudaIpcGetMemHandle");
    e.handle.size = size;
    std::memcpy(e.handle.bytes, &h, sizeof(h));
    // Entries of freed allocations that overlap this one are gone for good.
    for (auto o = lent_.lower_bound(base); o != lent_.end() && o->first < base + size;)
      o = lent_.erase(o);
    if (auto o = lent_.lower_bound(base); o != lent_.begin()) {
      auto before = std::prev(o);
      if (before->first + before->second.size > base) lent_.erase(before);
    }
    lent_[base] = {size, id, e.handle};
    return e;
  }

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
  void deallocate(const Segment& s) override {  // through the gate: it may wait for the device
    pack::FreeGate::get().release(pack::FreeGate::Kind::kDevice, s.ptr, gpu_of(s.ptr));
  }
  Result<void*> map(const PeerHandle& ph) override {
    cudaIpcMemHandle_t h;
    std::memcpy(&h, ph.bytes, sizeof(h));
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e == cudaErrorAlreadyMapped) {  // the peer freed what we map, and lent its successor
      cudaGetLastError();
      return Status(Err::kStale, "cudaIpcOpenMemHandle: a mapping of freed memory is in the way");
    }
    if (e != cudaSuccess) return cuda_err(e, "cudaIpcOpenMemHandle");
    return p;
  }
  void unmap(void* p, const PeerHandle&) override {
    if (cudaIpcCloseMemHandle(p) != cudaSuccess) cudaGetLastError();
  }
  int device_of(const void* p) override { return gpu_of(p); }

 private:
  std::mutex export_mu_;
  struct Lent {
    size_t size = 0;
    unsigned long long id = 0;  // the driver's buffer id
    PeerHandle handle;
  };
  std::map<CUdeviceptr, Lent> lent_;  // allocations lent as they lie, by base
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
