// The lane on a CUDA stream: pack and unpack kernels (Loom's GPU engine) on
// the caller's stream, reading and writing mapped pinned staging; flags by
// stream memory operations on mapped pinned words.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "pack/gpu_engine.hpp"
#include "pack/pools.hpp"
#include "stream/lane.hpp"
#include "transport/driver_entry.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::stream {
namespace {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return Status(Err::kCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

using MemOpFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// What every CUDA lane of the process shares: the driver's stream memory
// operations (found once, through the runtime, so libloom needs no libcuda
// at link time), mapped pinned memory, and GPU layouts by (form, count).
struct Shared {
  std::mutex mu;
  bool probed = false;
  MemOpFn write32 = nullptr, wait32 = nullptr;
  std::unique_ptr<pack::PinnedPool> pinned;
  std::map<std::tuple<const type::Node*, int64_t, int64_t>,
           std::pair<type::NodePtr, std::shared_ptr<pack::GpuLayout>>>
      layouts;

  void probe() {
    if (probed) return;
    probed = true;
    write32 = reinterpret_cast<MemOpFn>(transport::driver_entry("cuStreamWriteValue32"));
    wait32 = reinterpret_cast<MemOpFn>(transport::driver_entry("cuStreamWaitValue32"));
    if (!write32 || !wait32)
      LOOM_WARN(kTransport, "no stream memory operations: host functions stand in (slower)");
    pinned = std::make_unique<pack::PinnedPool>();
  }

  Result<std::shared_ptr<pack::GpuLayout>> layout(const transport::Message& m) {
    std::lock_guard<std::mutex> lk(mu);
    auto key = std::make_tuple(m.form.get(), m.count, m.extent);
    auto it = layouts.find(key);
    if (it != layouts.end()) return it->second.second;
    pack::Layout owned;
    auto v = transport::message_view(m, owned);
    if (!v) return v.status();
    auto gl = pack::GpuLayout::create(v.value());
    if (!gl) return gl.status();
    auto p = std::make_shared<pack::GpuLayout>(std::move(gl.value()));
    layouts.emplace(key, std::make_pair(m.form, p));
    return p;
  }
};

Shared& shared() {
  static Shared* s = new Shared();  // lives to the end: host functions may still run
  return *s;
}

struct WaitArgs {
  const uint32_t* word;
  uint32_t value;
};

// Host functions must not call CUDA: these touch only host words.
void host_write(void* p) {
  auto* a = static_cast<WaitArgs*>(p);
  reinterpret_cast<std::atomic<uint32_t>*>(const_cast<uint32_t*>(a->word))
      ->store(a->value, std::memory_order_release);
  delete a;
}
void host_wait(void* p) {
  auto* a = static_cast<WaitArgs*>(p);
  const auto* w = reinterpret_cast<const std::atomic<uint32_t>*>(a->word);
  while (!reached(w->load(std::memory_order_acquire), a->value)) std::this_thread::yield();
  delete a;
}

class CudaLane final : public Lane {
 public:
  CudaLane(cudaStream_t s, unsigned* counters) : s_(s), counters_(counters) {
    cudaGetDevice(&device_);
  }
  bool emulated() const override { return false; }
  void enter() override { cudaSetDevice(device_); }
  int enter_for_now() override {
    int was = -1;
    if (cudaGetDevice(&was) != cudaSuccess) {
      cudaGetLastError();
      was = -1;
    }
    if (was != device_) cudaSetDevice(device_);
    return was;
  }
  void leave(int was) override {
    if (was >= 0 && was != device_) cudaSetDevice(was);
  }
  bool holds() const override { return s_ != cudaStreamPerThread; }
  Status prepare(const transport::Message& m) override {
    if (m.bytes == 0) return Status::ok();
    return shared().layout(m).status();
  }

  Status write(uint32_t* word, uint32_t value) override {
    Shared& sh = shared();
    if (sh.write32) {
      uint32_t* dev = nullptr;
      LOOM_TRY(word_address(word, &dev));
      if (sh.write32(reinterpret_cast<CUstream>(s_), reinterpret_cast<CUdeviceptr>(dev), value,
                     CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS)
        return Status::ok();
    }
    return cuda_status(cudaLaunchHostFunc(s_, host_write, new WaitArgs{word, value}), "flag");
  }
  Status wait(uint32_t* word, uint32_t value, Writer by) override {
    Shared& sh = shared();
    if (sh.wait32) {
      uint32_t* dev = nullptr;
      LOOM_TRY(word_address(word, &dev));
      if (by == Writer::kThread) {  // the polling kernel (Writer says why)
        const uint32_t* d = dev;
        return pack::gpu_wait_many(&d, &value, 1, s_);
      }
      if (sh.wait32(reinterpret_cast<CUstream>(s_), reinterpret_cast<CUdeviceptr>(dev), value,
                    CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS)
        return Status::ok();
    }
    return cuda_status(cudaLaunchHostFunc(s_, host_wait, new WaitArgs{word, value}), "wait");
  }
  Status pack(const transport::Message& m, const void* user, void* packed) override {
    if (m.bytes == 0) return Status::ok();
    auto gl = shared().layout(m);
    if (!gl) return gl.status();
    return pack::gpu_pack(*gl.value(), user, device_address(packed), s_);
  }
  Status unpack(const transport::Message& m, const void* packed, void* user) override {
    if (m.bytes == 0) return Status::ok();
    auto gl = shared().layout(m);
    if (!gl) return gl.status();
    return pack::gpu_unpack(*gl.value(), device_address(packed), user, s_);
  }
  Status run_many(const LaneJob* jobs, size_t n) override { return run_then(jobs, n, nullptr, 0); }
  Status run_many_write(const LaneJob* jobs, size_t n, uint32_t* word, uint32_t value) override {
    if (!counters_) return Lane::run_many_write(jobs, n, word, value);
    return run_then(jobs, n, word, value);
  }
  // run_many, then (word set) *word = value, written by the last launch
  // itself where it can.
  Status run_then(const LaneJob* jobs, size_t n, uint32_t* word, uint32_t value) {
    std::vector<std::shared_ptr<pack::GpuLayout>> keep;
    std::vector<pack::GpuJob> gj;
    {
      stats::Scope phase(stats::kLaneJobs);
      keep.reserve(2 * n);
      gj.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        if (jobs[i].m->bytes == 0) continue;
        auto gl = shared().layout(*jobs[i].m);
        if (!gl) return gl.status();
        keep.push_back(gl.value());
        pack::GpuJob j;
        if (jobs[i].from) {  // the sender's layout at src -> ours at dst
          auto from = shared().layout(*jobs[i].from);
          if (!from) return from.status();
          keep.push_back(from.value());
          j.layout = from.value().get();
          j.user = jobs[i].src;
          j.into = gl.value().get();
          j.packed = jobs[i].dst;
          gj.push_back(j);
          continue;
        }
        j.layout = keep.back().get();
        j.pack = jobs[i].pack;
        j.user = jobs[i].pack ? jobs[i].src : jobs[i].dst;
        j.packed = device_address(jobs[i].pack ? jobs[i].dst : jobs[i].src);
        gj.push_back(j);
      }
    }
    if (!word) return gj.empty() ? Status::ok() : pack::gpu_run_many(gj.data(), gj.size(), s_);
    uint32_t* dev = nullptr;
    LOOM_TRY(word_address(word, &dev));
    bool written = false;
    pack::GpuSignal then;
    then.words = &dev;
    then.values = &value;
    then.n = 1;
    then.counters = counters_;
    then.written = &written;
    LOOM_TRY(pack::gpu_run_many(gj.data(), gj.size(), s_, &then));
    return written ? Status::ok() : write(word, value);  // no kernel (a copy): a memory operation
  }
  // One word: a stream memory operation; more: one kernel for all (a memory
  // operation each would cost the stream as much as a launch each).
  Status write_many(uint32_t* const* words, const uint32_t* values, size_t n) override {
    if (n <= 1 || !shared().write32) return Lane::write_many(words, values, n);
    std::vector<uint32_t*> dev(n);
    for (size_t i = 0; i < n; ++i) LOOM_TRY(word_address(words[i], &dev[i]));
    return pack::gpu_signal_many(dev.data(), values, n, s_);
  }
  Status wait_many(uint32_t* const* words, const uint32_t* values, size_t n, Writer by) override {
    if (n <= 1 || !shared().wait32) return Lane::wait_many(words, values, n, by);
    std::vector<const uint32_t*> dev(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t* d = nullptr;
      LOOM_TRY(word_address(words[i], &d));
      dev[i] = d;
    }
    return pack::gpu_wait_many(dev.data(), values, n, s_);
  }
  Status copy_in(void* block, const void* user, size_t bytes) override {
    return cuda_status(cudaMemcpyAsync(block, user, bytes, cudaMemcpyDefault, s_), "copy");
  }
  Status copy_out(void* user, const void* block, size_t bytes) override {
    return cuda_status(cudaMemcpyAsync(user, block, bytes, cudaMemcpyDefault, s_), "copy");
  }
  Status copy_from(const Landed* landed, void* dst, size_t max, const PullWaits& first) override {
    uint32_t* release = nullptr;
    if (first.release) LOOM_TRY(word_address(first.release, &release));
    if ((release || first.sender) && max > 0 && max <= pack::gpu_pull_small_max())
      return pack::gpu_pull_small(
          release, first.value, static_cast<const uint64_t*>(device_address(landed)), dst, max, s_);
    if (release) {  // the polling kernel (Writer says why)
      const uint32_t* r = release;
      LOOM_TRY(pack::gpu_wait_many(&r, &first.value, 1, s_));
    }
    if (first.sender)
      LOOM_TRY(pack::gpu_wait_published(
          static_cast<const uint64_t*>(device_address(&landed->wait_word)), s_));
    if (!near_) {  // stream order: one pair of words serves every copy of the stream
      void* p = nullptr;
      LOOM_TRY(cuda_status(cudaMalloc(&p, sizeof(Landed)), "device words"));
      near_ = static_cast<uint64_t*>(p);
    }
    return pack::gpu_copy_from(reinterpret_cast<const uint64_t*>(landed), near_, dst, max, s_);
  }
  Status launch_host(void (*fn)(void*), void* arg) override {
    return cuda_launch_host(s_, fn, arg);
  }
  Status synchronize() override { return cuda_synchronize(s_); }
  Result<Block> alloc(size_t bytes) override {
    Shared& sh = shared();
    pack::PinnedPool* pool;
    {
      std::lock_guard<std::mutex> lk(sh.mu);
      pool = sh.pinned.get();
    }
    auto l = pack::lease(*pool, bytes ? bytes : 1);
    if (!l) return l.status();
    auto lease = std::make_shared<pack::PoolLease>(std::move(l.value()));
    Block b;
    b.host = lease->get();
    b.dev = lease->dev();
    b.bytes = bytes;
    b.hold = lease;
    return b;
  }

 private:
  // Device addresses of mapped host memory, by page: the lane flags the same
  // words and stages in the same pooled blocks over and over, and a driver
  // lookup each time cost a halo's enqueue calls tens of microseconds an
  // iteration. Only pages whose device address is their host address are
  // kept (mapped pinned memory under unified addressing): a page freed and
  // reused then gives the address a failed lookup falls back to anyway.
  bool cached(const void* host, void** dev) {
    const uintptr_t page = reinterpret_cast<uintptr_t>(host) & ~uintptr_t{4095};
    {
      std::lock_guard<std::mutex> lk(dev_mu_);
      if (identity_pages_.count(page)) {
        *dev = const_cast<void*>(host);
        return true;
      }
    }
    void* d = nullptr;
    if (cudaHostGetDevicePointer(&d, const_cast<void*>(host), 0) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    *dev = d;
    if (d != host) return true;
    std::lock_guard<std::mutex> lk(dev_mu_);
    if (identity_pages_.size() > 65536) identity_pages_.clear();
    identity_pages_.insert(page);
    return true;
  }
  Status word_address(uint32_t* word, uint32_t** dev) {
    void* d = nullptr;
    if (!cached(word, &d)) return Status(Err::kCuda, "flag address: not mapped host memory");
    *dev = static_cast<uint32_t*>(d);
    return Status::ok();
  }
  void* device_address(const void* host) {
    void* dev = nullptr;
    if (!cached(host, &dev)) return const_cast<void*>(host);  // unified addressing: the same
    return dev;
  }
  cudaStream_t s_;
  unsigned* counters_ = nullptr;  // run_many_write's fused words (pack::gpu_signal_counters)
  int device_ = 0;
  uint64_t* near_ = nullptr;  // copy_from's (kept: freeing would synchronise the device)
  std::mutex dev_mu_;
  std::unordered_set<uintptr_t> identity_pages_;  // pages mapped at their own address
};

}  // namespace

Result<std::unique_ptr<Lane>> make_cuda_lane(void* cuda_stream) {
  if (!pack::gpu_available()) return Status(Err::kUnsupported, "no usable GPU");
  // A stream of this context? cudaStreamQuery says so without waiting.
  cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(cuda_stream));
  if (e != cudaSuccess && e != cudaErrorNotReady)
    return cuda_status(e, "not a CUDA stream of this process");
  {
    std::lock_guard<std::mutex> lk(shared().mu);
    shared().probe();
  }
  // Now, while no stream waits on Loom: the stream thread packs with these.
  if (Status p = pack::gpu_preload(); !p)
    LOOM_WARN(kTransport, "loading the pack kernels: %s", p.message().c_str());
  // Zeroed on the stream itself, which alone uses them: not for the
  // per-thread default stream, which is another stream in each thread that
  // enqueues (launches there could run at once and share the counters).
  unsigned* counters = nullptr;
  if (static_cast<cudaStream_t>(cuda_stream) != cudaStreamPerThread) {
    auto c = pack::gpu_signal_counters(static_cast<cudaStream_t>(cuda_stream));
    if (c)
      counters = c.value();
    else
      LOOM_DEBUG(kTransport, "no signal counters: %s", c.status().message().c_str());
  }
  return std::unique_ptr<Lane>(new CudaLane(static_cast<cudaStream_t>(cuda_stream), counters));
}

Status cuda_synchronize(void* cuda_stream) {
  return cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(cuda_stream)), "synchronize");
}

Status cuda_launch_host(void* cuda_stream, void (*fn)(void*), void* arg) {
  return cuda_status(cudaLaunchHostFunc(static_cast<cudaStream_t>(cuda_stream), fn, arg),
                     "host function");
}

bool cuda_transfer_possible(const transport::Message& from, const void* src,
                            const transport::Message& to, const void* dst) {
  auto a = shared().layout(from);
  auto b = shared().layout(to);
  return a && b && pack::gpu_transfer_possible(*a.value(), src, *b.value(), dst);
}

namespace {

// Registers host memory shared with other processes for the GPU; memory
// another part of this process registered already is fine as it is.
Status register_shared(void* page, size_t bytes, unsigned flags, const char* what) {
  const cudaError_t e = cudaHostRegister(page, bytes, flags);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    cudaGetLastError();
    return Status::ok();
  }
  return cuda_status(e, what);
}

}  // namespace

Status cuda_attach_host_words(void* page, size_t bytes) {
  return register_shared(page, bytes, cudaHostRegisterMapped, "registering pair words");
}

Result<void*> cuda_attach_ready_page(void* page, size_t bytes, bool read_only) {
  LOOM_TRY(register_shared(page, bytes,
                           cudaHostRegisterMapped | cudaHostRegisterPortable |
                               (read_only ? cudaHostRegisterReadOnly : 0),
                           "registering ready words"));
  void* dev = nullptr;
  LOOM_TRY(cuda_status(cudaHostGetDevicePointer(&dev, page, 0), "ready words' device address"));
  return dev;
}

void cuda_lanes_release() {
  Shared& sh = shared();
  std::lock_guard<std::mutex> lk(sh.mu);
  sh.layouts.clear();
  if (sh.pinned) sh.pinned->release_all();
}

}  // namespace loom::stream
