// The resident copy agent's kernel and its host handle (pack/proxy_queue.hpp
// says what it is for, pack/proxy_protocol.hpp how it and the host agree).
#include <cuda_runtime_api.h>

#include <cstring>

#include "pack/proxy_queue.hpp"

namespace loom::pack {
namespace {

constexpr int kProxyThreads = 1024;  // one block: one SM while it runs

// System-scope order for memory the host shares (mapped pinned memory).
struct GpuSys {
  __device__ static uint64_t load(uint64_t* p) {
    const uint64_t v = *static_cast<volatile uint64_t*>(p);
    __threadfence_system();  // what follows reads after this load
    return v;
  }
  __device__ static void store32(uint32_t* p, uint32_t v) {
    __threadfence_system();
    *static_cast<volatile uint32_t*>(p) = v;
  }
  __device__ static void fence() { __threadfence_system(); }
};

// Acquire and release at system scope, lighter than a full fence: a
// request's words before its data, the block's copy before its count.
__device__ uint64_t load_acquire(const volatile uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ void store_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The whole block copies: 16-byte words where both ends agree on alignment,
// bytes at the edges and otherwise. Loads skip L1 (ld.cg): the agent lives
// long, and a line it read before may have changed since in L2.
__device__ void block_copy(char* dst, const char* src, uint64_t n) {
  const unsigned t = threadIdx.x;
  uint64_t lead = 0, words = 0;
  if (((reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    lead = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    if (lead > n) lead = n;
    words = (n - lead) / 16;
  }
  const uint64_t body = lead + words * 16;
  for (uint64_t i = t; i < lead; i += kProxyThreads) dst[i] = __ldcg(src + i);
  const uint4* s4 = reinterpret_cast<const uint4*>(src + lead);
  uint4* d4 = reinterpret_cast<uint4*>(dst + lead);
  uint64_t i = t;
  for (; i + 3 * kProxyThreads < words; i += 4 * kProxyThreads) {
    const uint4 a = __ldcg(s4 + i), b = __ldcg(s4 + i + kProxyThreads),
                c = __ldcg(s4 + i + 2 * kProxyThreads), d = __ldcg(s4 + i + 3 * kProxyThreads);
    d4[i] = a;
    d4[i + kProxyThreads] = b;
    d4[i + 2 * kProxyThreads] = c;
    d4[i + 3 * kProxyThreads] = d;
  }
  for (; i < words; i += kProxyThreads) d4[i] = __ldcg(s4 + i);
  for (uint64_t j = body + t; j < n; j += kProxyThreads) dst[j] = __ldcg(src + j);
}

enum Step { kWork, kExit };

// Warp 0 waits for request `tail + 1`: lanes 0-2 read its slot's three words
// and lane 3 the stop flag, all in one trip over PCIe.
__device__ Step await_request(ProxyCtl* c, const ProxySlot* ring, uint64_t tail, uint64_t idle_ns,
                              uint64_t* last, uint64_t w[3]) {
  const unsigned lane = threadIdx.x & 31;
  const volatile uint64_t* slot = ring[tail % kProxyRing].w;
  for (;;) {
    uint64_t mine = 0;
    if (lane < 3) mine = load_acquire(slot + lane);
    if (lane == 3) mine = *static_cast<volatile uint32_t*>(&c->stop);
    const bool ok = lane >= 3 || proxy_word_is(mine, tail + 1);
    for (int k = 0; k < 3; ++k) w[k] = __shfl_sync(0xffffffffu, mine, k);
    const bool stop = __shfl_sync(0xffffffffu, mine, 3) != 0;
    if (__all_sync(0xffffffffu, ok)) return kWork;
    if (stop) return kExit;
    // Lane 0 decides for the warp (the lanes' clocks need not agree).
    const bool idle = __shfl_sync(0xffffffffu, now_ns() - *last > idle_ns, 0);
    if (idle) {
      const bool leave = lane == 0 && proxy_leave<GpuSys>(c, tail);
      if (__shfl_sync(0xffffffffu, leave, 0)) return kExit;
    }
  }
}

__global__ void __launch_bounds__(kProxyThreads)
    proxy_agent(ProxyCtl* c, const ProxySlot* ring, uint64_t idle_ns) {
  __shared__ uint64_t req[3];
  __shared__ int step;
  uint64_t tail = GpuSys::load(&c->tail);
  uint64_t last = now_ns();
  for (;;) {
    if (threadIdx.x < 32) {
      uint64_t w[3];
      const Step s = await_request(c, ring, tail, idle_ns, &last, w);
      if (threadIdx.x == 0) {
        for (int k = 0; k < 3; ++k) req[k] = proxy_value(w[k]);
        step = s;
      }
    }
    __syncthreads();
    if (step == kExit) return;
    block_copy(reinterpret_cast<char*>(req[0]), reinterpret_cast<const char*>(req[1]), req[2]);
    __syncthreads();
    ++tail;  // every thread keeps the count (warp 0 reads the next slot by it)
    last = now_ns();
    if (threadIdx.x == 0) {
      // The block's copy (ordered before by the barrier) before the count
      // that says it is done.
      store_release(&c->tail, tail);
    }
  }
}

class GpuAgent final : public ProxyAgent {
 public:
  ~GpuAgent() override {
    if (event_) cudaEventDestroy(event_);
    if (stream_) cudaStreamDestroy(stream_);
    if (host_) cudaFreeHost(host_);
  }
  Status init() {
    const size_t bytes = sizeof(ProxyCtl) + sizeof(ProxySlot) * kProxyRing;
    if (cudaHostAlloc(&host_, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
        cudaHostGetDevicePointer(&dev_, host_, 0) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&event_, cudaEventDisableTiming) != cudaSuccess)
      return error("copy agent setup");
    std::memset(host_, 0, bytes);
    return Status::ok();
  }
  ProxyCtl* ctl() override { return static_cast<ProxyCtl*>(host_); }
  ProxySlot* ring() override {
    return reinterpret_cast<ProxySlot*>(static_cast<char*>(host_) + sizeof(ProxyCtl));
  }
  Status launch(uint64_t idle_ns) override {
    auto* c = static_cast<ProxyCtl*>(dev_);
    auto* r = reinterpret_cast<const ProxySlot*>(static_cast<char*>(dev_) + sizeof(ProxyCtl));
    proxy_agent<<<1, kProxyThreads, 0, stream_>>>(c, r, idle_ns);
    if (cudaGetLastError() != cudaSuccess || cudaEventRecord(event_, stream_) != cudaSuccess)
      return error("copy agent launch");
    return Status::ok();
  }
  Run run() override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return Run::kRunning;
    if (e == cudaSuccess) return Run::kExited;
    failure_ = cudaGetErrorString(e);
    cudaGetLastError();
    return Run::kFailed;
  }
  std::string failure() override { return failure_; }

 private:
  Status error(const char* what) {
    const cudaError_t e = cudaGetLastError();
    failure_ = std::string(what) + ": " + cudaGetErrorString(e);
    return Status(Err::kCuda, failure_);
  }
  void* host_ = nullptr;
  void* dev_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
  std::string failure_;
};

}  // namespace

Result<std::unique_ptr<ProxyQueue>> make_gpu_proxy(uint64_t idle_ns) {
  auto agent = std::make_unique<GpuAgent>();
  LOOM_TRY(agent->init());
  return std::make_unique<ProxyQueue>(std::move(agent), idle_ns);
}

}  // namespace loom::pack
