// The GPU movers: one-shot (pack straight into mapped pinned host memory)
// and staged (pack into device scratch, one copy to pinned host memory).
//
// When memory runs short they degrade instead of failing: pinned staging
// falls back to pageable memory (then the packed bytes go through device
// scratch and a copy), and without device scratch the host engine packs a
// host copy of the data's span. Each fallback logs once.
#include <cuda.h>  // stream memory operations, reached through the runtime
#include <cuda_runtime_api.h>

#include <atomic>
#include <map>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include "pack/gpu_engine.hpp"
#include "pack/host_engine.hpp"
#include "pack/pools.hpp"
#include "transport/driver_entry.hpp"
#include "transport/memtype.hpp"
#include "transport/mover.hpp"
#include "type/canonical.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::transport {
namespace {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return Status(Err::kCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

class GpuMover final : public Mover {
 public:
  GpuMover(Method m, bool nonblocking, pack::ProxyQueue* proxy, size_t proxy_max)
      : method_(m),
        nonblocking_(nonblocking),
        no_pools_(knob_true(knobs().test_no_pools)),
        proxy_(proxy),
        proxy_max_(proxy_max) {}
  ~GpuMover() override {
    if (stream_) cudaStreamSynchronize(stream_);
    layouts_.clear();
    if (words_registered_) cudaHostUnregister(words_host_);
    if (done_host_) cudaFreeHost(done_host_);
    pinned_.release_all();
    scratch_.release_all();
    if (stream_) cudaStreamDestroy(stream_);
  }

  // A blocking stream: Loom's copies and kernels start after work the
  // application queued on the legacy default stream (a kernel that filled a
  // send buffer, or the DMA of a cudaMemcpy from pageable memory, which may
  // still be landing when cudaMemcpy returns), as a synchronous MPI call is
  // expected to see it.
  // A non-blocking mover (make_gpu_mover) orders nothing after the legacy
  // stream and never touches it: for threads of Loom's own that must not
  // wait on the application's streams.
  Status init() {
    write32_ = reinterpret_cast<WriteFn>(driver_entry("cuStreamWriteValue32"));
    void* done = nullptr;
    if (write32_ && knob_true(knobs().wait_flag) &&
        cudaHostAlloc(&done, 64, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
      done_host_ = static_cast<uint32_t*>(done);
      *done_host_ = 0;
      if (cudaHostGetDevicePointer(&done, done_host_, 0) == cudaSuccess)
        done_dev_ = static_cast<uint32_t*>(done);
    }
    cudaGetLastError();
    if (cudaGetDevice(&device_) != cudaSuccess) {
      cudaGetLastError();
      device_ = -1;
    }
    // One-shot packs are waited for at once (small messages, a blocking
    // call's): their stream goes first, ahead of the staged mover's batched
    // packs and unpacks, which a halo exchange queues by the hundred.
    int least = 0, greatest = 0;
    if (method_ != Method::kOneShot ||
        cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) {
      cudaGetLastError();
      greatest = 0;
    }
    LOOM_TRY(cuda_status(
        cudaStreamCreateWithPriority(
            &stream_, nonblocking_ ? cudaStreamNonBlocking : cudaStreamDefault, greatest),
        "stream"));
    // Now, before any stream waits on Loom: the batched packs' last launch
    // writes the ready words itself, counting in these (none: a signal kernel).
    if (auto c = pack::gpu_signal_counters(stream_))
      counters_ = c.value();
    else
      LOOM_DEBUG(kTransport, "no signal counters: %s", c.status().message().c_str());
    return Status::ok();
  }

  Method method() const override { return method_; }

  Result<Staged> pack(const Message& m, const void* user) override {
    auto s = stage(static_cast<size_t>(m.bytes));
    if (!s || m.bytes == 0) return s;
    auto gl = gpu_layout(m);
    if (!gl) return gl.status();
    LOOM_DEBUG(kTransport, "%s pack: %lld bytes, %lld x form %s, from %p", method_name(method_),
               (long long)m.bytes, (long long)m.count, type::to_string(m.form).c_str(), user);
    if (method_ == Method::kOneShot && s->dev) {
      // A contiguous message: the copy agent writes it into the mapped
      // staging (no launch, no synchronisation), or the copy engines do,
      // about 2 us less than a kernel and its wait
      // (docs/results/p2p-h200-targets.md, floors).
      if (int64_t base = 0; contiguous_at(m, &base)) {
        const char* from = static_cast<const char*>(user) + base;
        const size_t n = static_cast<size_t>(m.bytes);
        if (agent_copy(s->dev, from, n)) return s;
        LOOM_TRY(cuda_status(cudaMemcpyAsync(s->host, from, n, cudaMemcpyDeviceToHost, stream_),
                             "copy to host"));
        LOOM_TRY(finish("pack"));
        return s;
      }
      LOOM_TRY(pack::gpu_pack(*gl.value(), user, s->dev, stream_));
      LOOM_TRY(finish("pack"));
      return s;
    }
    auto scratch = scratch_lease(static_cast<size_t>(m.bytes));
    if (!scratch) {
      LOOM_TRY(host_engine_pack(m, user, s->host));
      return s;
    }
    LOOM_TRY(pack::gpu_pack(*gl.value(), user, scratch->get(), stream_));
    LOOM_TRY(cuda_status(
        cudaMemcpyAsync(s->host, scratch->get(), m.bytes, cudaMemcpyDeviceToHost, stream_),
        "copy to host"));
    LOOM_TRY(finish("pack"));
    return s;
  }

  // Mapped pinned memory from the pool; pageable memory when that fails (the
  // kernels cannot write it, so it is reached through scratch and a copy).
  Result<Staged> stage(size_t bytes) override {
    Staged s;
    s.bytes = bytes;
    if (bytes == 0) return s;
    if (!no_pools_) {
      auto l = pack::lease(pinned_, bytes);
      if (l) {
        auto lease = std::make_shared<pack::PoolLease>(std::move(l.value()));
        s.host = lease->get();
        s.dev = lease->dev();
        s.hold = lease;
        return s;
      }
    }
    warn_once(pinned_warned_, "no pinned staging: using pageable host memory (slower)");
    auto buf = std::shared_ptr<char[]>(new (std::nothrow) char[bytes]);
    if (!buf) return Status(Err::kNoMemory, "host staging");
    s.host = buf.get();
    s.hold = buf;
    return s;
  }

  Result<Staged> scratch(size_t bytes) override {
    Staged s;
    s.bytes = bytes;
    if (bytes == 0) return s;
    auto l = scratch_lease(bytes);
    if (!l) return l.status();
    auto lease = std::make_shared<pack::PoolLease>(std::move(l.value()));
    s.dev = lease->get();
    s.hold = lease;
    return s;
  }

  Status unpack(const Message& m, const Staged& s, size_t received, void* user) override {
    if (received == 0 || m.bytes == 0) return Status::ok();
    const char* src = static_cast<const char*>(s.dev);
    if (int64_t base = 0; method_ == Method::kOneShot && src && contiguous_at(m, &base)) {
      char* to = static_cast<char*>(user) + base;  // as pack(): the agent, or the copy engines
      if (agent_copy(to, src, received)) return Status::ok();
      LOOM_TRY(cuda_status(cudaMemcpyAsync(to, s.host, received, cudaMemcpyHostToDevice, stream_),
                           "copy to device"));
      return finish("unpack");
    }
    pack::PoolLease scratch;
    if (method_ != Method::kOneShot || !src) {
      auto l = scratch_lease(received);
      if (!l) return host_engine_unpack(m, s.host, received, user);
      scratch = std::move(l.value());
      LOOM_TRY(cuda_status(
          cudaMemcpyAsync(scratch.get(), s.host, received, cudaMemcpyHostToDevice, stream_),
          "copy to device"));
      src = static_cast<const char*>(scratch.get());
    }
    return unpack_from(m, src, received, user);
  }

  // Staged, pipelined: one pack into scratch, then a copy and an event per
  // chunk; each chunk goes out as soon as its event fires.
  Result<Staged> pack_chunked(const Message& m, const void* user, size_t chunk,
                              const ChunkReady& ready, const std::function<void()>& idle,
                              Staged* keep) override {
    if (method_ != Method::kStaged || m.bytes == 0 || chunk == 0)
      return Mover::pack_chunked(m, user, chunk, ready, idle, keep);
    auto s = stage(static_cast<size_t>(m.bytes));
    if (!s) return s;
    if (keep) *keep = *s;
    auto gl = gpu_layout(m);
    if (!gl) return gl.status();
    auto scratch = scratch_lease(static_cast<size_t>(m.bytes));
    if (!scratch) return Mover::pack_chunked(m, user, chunk, ready, idle, keep);
    LOOM_TRY(pack::gpu_pack(*gl.value(), user, scratch->get(), stream_));
    const size_t n = s->bytes, k = (n + chunk - 1) / chunk;
    std::vector<cudaEvent_t> done(k, nullptr);
    Status st;
    for (size_t i = 0; i < k && st.is_ok(); ++i) {
      const size_t off = i * chunk, len = std::min(chunk, n - off);
      st = cuda_status(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming), "event");
      if (st.is_ok())
        st = cuda_status(cudaMemcpyAsync(static_cast<char*>(s->host) + off,
                                         static_cast<const char*>(scratch->get()) + off, len,
                                         cudaMemcpyDeviceToHost, stream_),
                         "copy to host");
      if (st.is_ok()) st = cuda_status(cudaEventRecord(done[i], stream_), "event");
    }
    for (size_t i = 0; i < k && st.is_ok(); ++i) {
      cudaError_t e = cudaErrorNotReady;
      if (idle)
        while ((e = cudaEventQuery(done[i])) == cudaErrorNotReady) idle();
      st = cuda_status(e == cudaErrorNotReady ? cudaEventSynchronize(done[i]) : e, "chunk copy");
      if (st.is_ok()) st = ready(i * chunk, std::min(chunk, n - i * chunk), s->host);
    }
    cudaStreamSynchronize(stream_);  // the scratch goes back to its pool next
    for (cudaEvent_t e : done)
      if (e) cudaEventDestroy(e);
    if (!st.is_ok()) return st;
    return s;
  }

  // Staged, pipelined: each chunk is copied up as it arrives; one unpack.
  Status unpack_chunked(const Message& m, const Staged& s, size_t received, size_t chunk,
                        const ChunkArrived& arrived, void* user) override {
    if (method_ != Method::kStaged || received == 0 || m.bytes == 0 || chunk == 0)
      return Mover::unpack_chunked(m, s, received, chunk, arrived, user);
    auto scratch = scratch_lease(received);
    if (!scratch) return Mover::unpack_chunked(m, s, received, chunk, arrived, user);
    for (size_t off = 0; off < received; off += chunk) {
      const size_t len = std::min(chunk, received - off);
      Status st = arrived(off, len);
      if (st.is_ok())
        st = cuda_status(cudaMemcpyAsync(static_cast<char*>(scratch->get()) + off,
                                         static_cast<const char*>(s.host) + off, len,
                                         cudaMemcpyHostToDevice, stream_),
                         "copy to device");
      if (!st.is_ok()) {
        cudaStreamSynchronize(stream_);  // the copies queued read s and write the scratch
        return st;
      }
    }
    return unpack_from(m, scratch->get(), received, user);
  }

  // Registers the page mapped, so the GPU writes its words after packs.
  Status map_words(void* page, size_t bytes) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (words_host_ == page) return Status::ok();
    if (!write32_) return Status(Err::kUnsupported, "no stream memory operations");
    // Another mover of this process (the stream thread's) may have registered it.
    const cudaError_t reg = cudaHostRegister(page, bytes, cudaHostRegisterMapped);
    LOOM_DEBUG(kTransport, "ready words registered (%d)", static_cast<int>(reg));
    if (reg == cudaErrorHostMemoryAlreadyRegistered)
      cudaGetLastError();
    else
      LOOM_TRY(cuda_status(reg, "ready words"));
    void* dev = nullptr;
    if (Status s = cuda_status(cudaHostGetDevicePointer(&dev, page, 0), "ready words"); !s) {
      if (reg == cudaSuccess) cudaHostUnregister(page);
      return s;
    }
    words_registered_ = reg == cudaSuccess;
    words_host_ = static_cast<char*>(page);
    words_dev_ = static_cast<char*>(dev);
    words_bytes_ = bytes;
    return Status::ok();
  }

  // The pack, then the word's write, on the stream; nothing waits. Without
  // a mapped word (or memory operations) it waits for the pack instead.
  Status pack_signal(const Message& m, const void* user, void* dst, uint32_t* word,
                     uint32_t value) override {
    on_device();  // Loom's flushing thread, too
    char* w = reinterpret_cast<char*>(word);
    if (!words_dev_ || w < words_host_ || w >= words_host_ + words_bytes_)
      return Mover::pack_signal(m, user, dst, word, value);
    if (m.bytes > 0) {
      auto gl = gpu_layout(m);
      if (!gl) return gl.status();
      LOOM_TRY(pack::gpu_pack(*gl.value(), user, dst, stream_));
    }
    // The default flags put a system-wide fence before the write: the
    // packed bytes are visible to the peer once the word is.
    const CUresult r =
        write32_(reinterpret_cast<CUstream>(stream_),
                 reinterpret_cast<CUdeviceptr>(words_dev_ + (w - words_host_)), value, 0);
    if (r != CUDA_SUCCESS) {
      LOOM_TRY(finish("pack"));
      reinterpret_cast<std::atomic<uint32_t>*>(word)->store(value, std::memory_order_release);
    }
    return Status::ok();
  }

  Status pack_signal_many(const std::vector<PackSignal>& jobs) override {
    // Before the layouts: a layout's tables go to the current device's memory.
    on_device();
    std::vector<pack::GpuJob> kernels;
    std::vector<std::shared_ptr<const pack::GpuLayout>> layouts;  // alive while planned
    std::vector<uint32_t*> words;
    std::vector<uint32_t> values;
    for (const PackSignal& j : jobs) {
      char* w = reinterpret_cast<char*>(j.word);
      if (!words_dev_ || w < words_host_ || w >= words_host_ + words_bytes_)
        return Mover::pack_signal_many(jobs);  // words this engine cannot write
      if (j.m.bytes > 0) {
        auto gl = gpu_layout(j.m);
        if (!gl) return gl.status();
        layouts.push_back(gl.value());
        kernels.push_back({gl.value().get(), j.user, j.dst, true});
      }
      words.push_back(reinterpret_cast<uint32_t*>(words_dev_ + (w - words_host_)));
      values.push_back(j.value);
    }
    pack::GpuSignal then;
    then.words = words.data();
    then.values = values.data();
    then.n = words.size();
    then.counters = counters_;
    return pack::gpu_run_many(kernels.data(), kernels.size(), stream_, &then);
  }

  Status pack_to(const Message& m, const void* user, void* dst) override {
    if (m.bytes == 0) return Status::ok();
    auto gl = gpu_layout(m);
    if (!gl) return gl.status();
    // A plain synchronisation: with finish()'s ticket a device-to-device
    // MPI_Pack of 1 MiB took 5-7 % longer (one H200, 2026-11-28).
    return pack::gpu_pack_sync(*gl.value(), user, dst, stream_);
  }

  // Unpacks from memory the GPU reads (device scratch, mapped pinned memory,
  // a peer's IPC segment): whole elements by kernel, then the leading bytes
  // of a partial one by copies.
  Status unpack_from(const Message& m, const void* packed, size_t received, void* user) override {
    const int64_t size = m.count ? m.bytes / m.count : 0;
    if (size == 0 || received == 0) return Status::ok();
    Message whole = m;
    whole.count = static_cast<int64_t>(received) / size;
    whole.bytes = whole.count * size;
    LOOM_DEBUG(kTransport, "%s unpack: %zu of %lld bytes, %lld x form %s, into %p",
               method_name(method_), received, (long long)m.bytes, (long long)whole.count,
               type::to_string(m.form).c_str(), user);
    const char* src = static_cast<const char*>(packed);
    if (whole.count > 0) {
      auto gl = gpu_layout(whole);
      if (!gl) return gl.status();
      LOOM_TRY(pack::gpu_unpack(*gl.value(), src, user, stream_));
    }
    const char* tail = src + whole.bytes;
    for (const auto& r :
         partial_runs(m, whole.count, static_cast<int64_t>(received) - whole.bytes)) {
      LOOM_TRY(cuda_status(cudaMemcpyAsync(static_cast<char*>(user) + r.off, tail, r.len,
                                           cudaMemcpyDefault, stream_),
                           "partial element"));
      tail += r.len;
    }
    return finish("unpack");
  }

  // One kernel per block, each reading its source where it lies (a peer's
  // segment on this GPU, or over the link), then one wait.
  Status unpack_batch(const Message& m, const std::vector<const void*>& src,
                      const std::vector<void*>& dst, size_t bytes) override {
    if (bytes == 0 || m.bytes == 0 || src.empty()) return Status::ok();
    if (static_cast<int64_t>(bytes) != m.bytes) return Mover::unpack_batch(m, src, dst, bytes);
    auto gl = gpu_layout(m);
    if (!gl) return gl.status();
    for (size_t i = 0; i < src.size(); ++i)
      LOOM_TRY(pack::gpu_unpack(*gl.value(), src[i], dst[i], stream_));
    return finish("unpack");
  }
  Status unpack_from_peer(const Message& m, const void* src, size_t received, void* user) override {
    if (received == 0 || m.bytes == 0) return Status::ok();
    if (int64_t base = 0; contiguous_at(m, &base)) {  // one copy, one wait
      if (agent_copy(static_cast<char*>(user) + base, src, received)) return Status::ok();
      LOOM_TRY(cuda_status(cudaMemcpyAsync(static_cast<char*>(user) + base, src, received,
                                           cudaMemcpyDeviceToDevice, stream_),
                           "copy from peer"));
      return finish("copy from peer");
    }
    if (on_this_gpu(src)) return unpack_from(m, src, received, user);
    auto l = scratch_lease(received);
    if (!l) return unpack_from(m, src, received, user);  // kernel loads over the link
    LOOM_TRY(
        cuda_status(cudaMemcpyAsync(l->get(), src, received, cudaMemcpyDeviceToDevice, stream_),
                    "copy from peer"));
    return unpack_from(m, l->get(), received, user);
  }

  // A peer's buffer in the peer's layout: one pack kernel reads it where it
  // lies (this GPU, or over the link) straight into a contiguous receive;
  // otherwise into scratch, then the receive's unpack.
  Status unpack_from_layout(const Message& m, const Message& from, const void* src, size_t received,
                            void* user) override {
    if (received == 0 || from.bytes == 0) return Status::ok();
    if (int64_t base = 0; contiguous_at(m, &base) && static_cast<int64_t>(received) == from.bytes)
      return pack_to(from, src, static_cast<char*>(user) + base);
    auto gf = gpu_layout(from);
    if (!gf) return gf.status();
    if (static_cast<int64_t>(received) == m.bytes && received == static_cast<size_t>(from.bytes))
      if (auto gm = gpu_layout(m)) {
        Status t = pack::gpu_transfer(*gf.value(), src, *gm.value(), user, stream_);
        if (t) return finish("transfer");
        if (t.code() != Err::kUnsupported) return t;
      }
    auto l = scratch_lease(static_cast<size_t>(from.bytes));
    if (!l) {  // the host engine on both sides' spans
      std::vector<char> packed(static_cast<size_t>(from.bytes));
      LOOM_TRY(host_engine_pack(from, src, packed.data()));
      return host_engine_unpack(m, packed.data(), received, user);
    }
    LOOM_TRY(pack::gpu_pack(*gf.value(), src, l->get(), stream_));
    return unpack_from(m, l->get(), received, user);
  }

  Status copy_to_host(void* host, const void* user, size_t bytes) override {
    if (nonblocking_) return copy(host, user, bytes);  // cudaMemcpy is the legacy stream's
    return cuda_status(cudaMemcpy(host, user, bytes, cudaMemcpyDefault), "copy to host");
  }
  Status copy_from_host(void* user, const void* host, size_t bytes) override {
    if (nonblocking_) return copy(user, host, bytes);
    return cuda_status(cudaMemcpy(user, host, bytes, cudaMemcpyDefault), "copy from host");
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    LOOM_TRY(cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "copy"));
    return finish("copy");
  }
  Status unpack_async(const Message& m, const void* src, size_t received, void* user,
                      std::vector<std::shared_ptr<void>>& keep) override {
    pack::GpuJob pre, job;
    LOOM_TRY(issue_unpack({&m, src, received, user}, keep, &pre, &job));
    return job.layout ? pack::gpu_run_many(&job, 1, stream_) : Status::ok();
  }
  Result<const uint32_t*> gpu_word(const uint32_t* host) override {
    const auto* c = reinterpret_cast<const char*>(host);
    const uintptr_t page = reinterpret_cast<uintptr_t>(host) & ~uintptr_t{4095};
    std::lock_guard<std::mutex> lk(mu_);
    if (words_dev_ && c >= words_host_ && c < words_host_ + words_bytes_)  // this process's own
      return reinterpret_cast<const uint32_t*>(words_dev_ + (c - words_host_));
    auto it = peer_words_.find(page);
    if (it == peer_words_.end()) {
      // A peer's page of ready words, mapped read-only here: registered
      // once, kept to the end (the mapping is never dropped either).
      void* p = reinterpret_cast<void*>(page);
      cudaError_t e = cudaHostRegister(p, 4096, cudaHostRegisterMapped | cudaHostRegisterReadOnly);
      if (e == cudaErrorHostMemoryAlreadyRegistered) e = cudaSuccess;
      void* dev = nullptr;
      if (e == cudaSuccess) e = cudaHostGetDevicePointer(&dev, p, 0);
      if (e != cudaSuccess) {
        cudaGetLastError();
        LOOM_DEBUG(kTransport, "a peer's ready words cannot be read by the GPU (%s)",
                   cudaGetErrorString(e));
        dev = nullptr;
      }
      it = peer_words_.emplace(page, static_cast<char*>(dev)).first;
    }
    if (!it->second) return Status(Err::kUnsupported, "a peer's ready words not registered");
    return reinterpret_cast<const uint32_t*>(it->second +
                                             (reinterpret_cast<uintptr_t>(host) - page));
  }

  void unpack_many_async(const std::vector<UnpackItem>& items,
                         std::vector<std::shared_ptr<void>>& keep,
                         std::vector<Status>& each) override {
    each.assign(items.size(), Status::ok());
    // The senders' packs still running: one wait for all their words first,
    // so no copy or kernel below reads a segment before its pack is done.
    std::vector<const uint32_t*> words;
    std::vector<uint32_t> values;
    for (const UnpackItem& it : items)
      if (it.wait_word) {
        words.push_back(it.wait_word);
        values.push_back(it.wait_value);
      }
    if (!words.empty())
      if (Status s =
              [&] {
                stats::Scope phase(stats::kGpuReadyWait);
                return pack::gpu_wait_many(words.data(), values.data(), words.size(), stream_);
              }();
          !s) {
        for (size_t i = 0; i < items.size(); ++i)  // not issued below: left to the caller
          if (items[i].wait_word) each[i] = s;
      }
    // Two rounds: the packs out of peers' layouts into scratch, then every
    // unpack. A batch launch runs its jobs side by side, so a scratch's
    // unpack must not share one with its pack.
    std::vector<pack::GpuJob> pres, jobs;
    std::vector<size_t> pre_of, of;  // the item of each job
    for (size_t i = 0; i < items.size(); ++i) {
      if (!each[i]) continue;  // its sender's pack could not be waited for
      pack::GpuJob pre, job;
      stats::Scope phase(stats::kIssueItems);
      each[i] = issue_unpack(items[i], keep, &pre, &job);
      if (!each[i]) continue;
      if (pre.layout) {
        pres.push_back(pre);
        pre_of.push_back(i);
      }
      if (job.layout) {
        jobs.push_back(job);
        of.push_back(i);
      }
    }
    if (!pres.empty())
      if (Status s = pack::gpu_run_many(pres.data(), pres.size(), stream_); !s) {
        // Their unpacks would read scratch never written: dropped; the
        // other items' unpacks still go (they had been left unlaunched
        // with an ok status, and acked).
        for (size_t k : pre_of) each[k] = s;
        size_t kept = 0;
        for (size_t i = 0; i < jobs.size(); ++i)
          if (each[of[i]].is_ok()) {
            jobs[kept] = jobs[i];
            of[kept++] = of[i];
          }
        jobs.resize(kept);
        of.resize(kept);
      }
    if (jobs.empty()) return;
    if (Status s = pack::gpu_run_many(jobs.data(), jobs.size(), stream_); !s)
      for (size_t k : of) each[k] = s;
  }
  Status wait_copies() override { return finish("copies"); }
  Status pack_async(const Message& m, const void* user, void* dst,
                    std::vector<std::shared_ptr<void>>& keep) override {
    if (m.bytes == 0) return Status::ok();
    auto gl = gpu_layout(m);
    if (!gl) return gl.status();
    LOOM_TRY(pack::gpu_pack(*gl.value(), user, dst, stream_));
    keep.push_back(std::const_pointer_cast<pack::GpuLayout>(gl.value()));
    return Status::ok();
  }
  Status copy_async(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "copy");
  }
  Status settle_user() override {
    if (nonblocking_) return Status::ok();  // its caller ordered the user's work itself
    return cuda_status(cudaStreamSynchronize(cudaStreamLegacy), "the application's GPU work");
  }
  size_t bytes_in_use() const override { return pinned_.bytes_in_use() + scratch_.bytes_in_use(); }

 private:
  // One unpack of unpack_async and unpack_many_async, issued on the stream
  // (copies, partial messages, staging from another GPU), except its
  // kernels, which are left in *pre (a pack out of a peer's layout) and
  // *job, to run after every *pre (layout null: no kernel to run). What
  // must live until the stream reaches them goes into `keep`.
  Status issue_unpack(const UnpackItem& it, std::vector<std::shared_ptr<void>>& keep,
                      pack::GpuJob* pre, pack::GpuJob* job) {
    *pre = *job = pack::GpuJob{};
    const Message& m = *it.m;
    if (it.received == 0 || m.bytes == 0) return Status::ok();
    if (it.from) return issue_from_layout(it, keep, pre, job);
    if (int64_t base = 0; contiguous_at(m, &base))
      return cuda_status(cudaMemcpyAsync(static_cast<char*>(it.user) + base, it.src, it.received,
                                         cudaMemcpyDeviceToDevice, stream_),
                         "copy from peer");
    if (static_cast<int64_t>(it.received) != m.bytes)
      return unpack_from_peer(m, it.src, it.received, it.user);
    auto gl = gpu_layout(m);
    if (!gl) return gl.status();
    const void* src = it.src;
    if (!(it.device >= 0 ? it.device == current_device() : on_this_gpu(src))) {
      // by copy engine (over the link, or host staging), then unpacked
      auto l = scratch_lease(it.received);
      if (!l) return unpack_from_peer(m, it.src, it.received, it.user);
      auto scratch = std::make_shared<pack::PoolLease>(std::move(l.value()));
      LOOM_TRY(
          cuda_status(cudaMemcpyAsync(scratch->get(), src, it.received, cudaMemcpyDefault, stream_),
                      "copy from peer"));
      src = scratch->get();
      keep.push_back(scratch);
    }
    keep.push_back(std::const_pointer_cast<pack::GpuLayout>(gl.value()));
    *job = {gl.value().get(), it.user, const_cast<void*>(src), false};
    return Status::ok();
  }

  // issue_unpack of a peer's buffer in the peer's layout: one pack into a
  // contiguous receive, or a pack into scratch and the receive's unpack.
  // Partial receives take the synchronous path.
  Status issue_from_layout(const UnpackItem& it, std::vector<std::shared_ptr<void>>& keep,
                           pack::GpuJob* pre, pack::GpuJob* job) {
    const Message& m = *it.m;
    const Message& from = *it.from;
    if (static_cast<int64_t>(it.received) != from.bytes)
      return unpack_from_layout(m, from, it.src, it.received, it.user);
    auto gf = gpu_layout(from);
    if (!gf) return gf.status();
    keep.push_back(std::const_pointer_cast<pack::GpuLayout>(gf.value()));
    if (int64_t base = 0; contiguous_at(m, &base)) {
      *job = {gf.value().get(), it.src, static_cast<char*>(it.user) + base, true};
      return Status::ok();
    }
    if (static_cast<int64_t>(it.received) != m.bytes)
      return unpack_from_layout(m, from, it.src, it.received, it.user);
    auto gm = gpu_layout(m);
    if (!gm) return gm.status();
    keep.push_back(std::const_pointer_cast<pack::GpuLayout>(gm.value()));
    // One kernel, layout to layout, batched with the others; where the
    // pair has none, a pack into scratch and an unpack.
    if (pack::gpu_transfer_possible(*gf.value(), it.src, *gm.value(), it.user)) {
      *job = {gf.value().get(), it.src, it.user, true, gm.value().get()};
      return Status::ok();
    }
    auto l = scratch_lease(it.received);
    if (!l) return unpack_from_layout(m, from, it.src, it.received, it.user);
    auto scratch = std::make_shared<pack::PoolLease>(std::move(l.value()));
    keep.push_back(scratch);
    *pre = {gf.value().get(), it.src, scratch->get(), true};
    *job = {gm.value().get(), it.user, scratch->get(), false};
    return Status::ok();
  }

  // The copy through the resident agent (LOOM_PROXY), no CUDA call at all;
  // false where there is none, the copy is over LOOM_PROXY_MAX, or it failed
  // (then the agent is dropped for good and the caller copies as before).
  bool agent_copy(void* dst, const void* src, size_t bytes) {
    pack::ProxyQueue* agent = proxy_.load(std::memory_order_relaxed);
    if (!agent || bytes > proxy_max_) return false;
    Status s = agent->copy(dst, src, bytes);
    if (s) return true;
    if (proxy_.exchange(nullptr))
      LOOM_WARN(kTransport, "copy agent: %s; copies go to the copy engines", s.message().c_str());
    return false;
  }

  // Waits for everything queued on the stream so far. The stream writes a
  // ticket into mapped host memory after it (cuStreamWriteValue32, with the
  // default system-wide fence before the write, so what the stream wrote is
  // visible once the ticket is) and the thread spins on it: under MPS that
  // is 0.4-1 us less a wait than cudaStreamSynchronize
  // (docs/results/p2p-h200-targets.md). Every 4096 polls the stream is
  // asked too, so a fault ends the wait with its error; a long wait (a large
  // unpack) ends in cudaStreamSynchronize, which keeps the application's
  // choice of spinning or blocking (cudaDeviceScheduleBlockingSync).
  Status finish(const char* what) {
    if (!done_dev_) return cuda_status(cudaStreamSynchronize(stream_), what);
    uint32_t ticket;
    {
      std::lock_guard<std::mutex> lk(done_mu_);  // tickets reach the stream in order
      ticket = ++done_ticket_;
      if (write32_(reinterpret_cast<CUstream>(stream_), reinterpret_cast<CUdeviceptr>(done_dev_),
                   ticket, 0) != CUDA_SUCCESS)
        return cuda_status(cudaStreamSynchronize(stream_), what);
    }
    const auto* word = reinterpret_cast<const std::atomic<uint32_t>*>(done_host_);
    for (uint32_t i = 1;; ++i) {
      if (static_cast<int32_t>(word->load(std::memory_order_acquire) - ticket) >= 0)
        return Status::ok();
      if ((i & 4095) == 0) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return Status::ok();
        if (e != cudaErrorNotReady) return cuda_status(e, what);
        cudaGetLastError();
        if (i >= (uint32_t{1} << 16)) return cuda_status(cudaStreamSynchronize(stream_), what);
      }
    }
  }

  Result<pack::PoolLease> scratch_lease(size_t bytes) {
    if (no_pools_) return Status(Err::kNoMemory, "pools off (LOOM_TEST_NO_POOLS)");
    return pack::lease(scratch_, bytes);
  }

  static int current_device() {
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
    return dev;
  }

  // The memory at p (a peer's segment mapped here) lies on the current GPU.
  // That is a driver query each time, so a batch's pulls pass what
  // Rendezvous::open learnt once, when it mapped the segment
  // (UnpackItem::device).
  static bool on_this_gpu(const void* p) {
    const int dev = gpu_of(p);
    return dev >= 0 && dev == current_device();
  }

  void warn_once(std::atomic<bool>& flag, const char* what) {
    if (!flag.exchange(true)) LOOM_WARN(kTransport, "%s", what);
  }

  // The host engine on a host copy of the data's span: the last resort when
  // no device scratch can be had.
  Status host_engine_pack(const Message& m, const void* user, void* out) {
    warn_once(host_warned_, "no device scratch: packing with the host engine (slow)");
    const Span sp = message_span(m);
    std::vector<char> copy(static_cast<size_t>(sp.size()));
    LOOM_TRY(copy_to_host(copy.data(), static_cast<const char*>(user) + sp.lo, copy.size()));
    pack::Layout owned;
    auto v = message_view(m, owned);
    if (!v) return v.status();
    pack::host_pack(*v, copy.data() - sp.lo, out);
    return Status::ok();
  }

  // The span comes down, the host engine unpacks into it, and it goes back
  // up whole: the gaps keep the bytes they had.
  Status host_engine_unpack(const Message& m, const void* packed, size_t received, void* user) {
    warn_once(host_warned_, "no device scratch: unpacking with the host engine (slow)");
    const Span sp = message_span(m);
    std::vector<char> copy(static_cast<size_t>(sp.size()));
    char* at = static_cast<char*>(user) + sp.lo;
    LOOM_TRY(copy_to_host(copy.data(), at, copy.size()));
    LOOM_TRY(host_unpack_received(m, packed, received, copy.data() - sp.lo));
    return copy_from_host(at, copy.data(), copy.size());
  }

  // GPU layouts (kernel choice, device block tables) per (form, count, extent).
  // Loom's own threads (the rendezvous' flusher) start on device 0: a rank
  // that chose another after MPI_Init would launch there, into a stream and
  // tables of the wrong device, and its receivers would wait forever.
  void on_device() const {
    int cur = -1;
    if (device_ >= 0 && (cudaGetDevice(&cur) != cudaSuccess || cur != device_) &&
        cudaSetDevice(device_) != cudaSuccess)
      cudaGetLastError();
  }

  Result<std::shared_ptr<const pack::GpuLayout>> gpu_layout(const Message& m) {
    std::lock_guard<std::mutex> lk(mu_);
    auto key = std::make_tuple(m.form.get(), m.count, m.extent);
    auto it = layouts_.find(key);
    if (it != layouts_.end()) return it->second.second;
    auto l = pack::make_layout(type::repeat(m.form, m.count, m.extent));
    if (!l) return l.status();
    auto gl = pack::GpuLayout::create(l.value());
    if (!gl) return gl.status();
    if (layouts_.size() >= kMaxLayouts) {
      cudaStreamSynchronize(stream_);  // packs that nobody waited for may still read them
      layouts_.clear();
    }
    auto p = std::make_shared<const pack::GpuLayout>(std::move(gl.value()));
    layouts_.emplace(key, std::make_pair(m.form, p));  // the form is held: its address stays unique
    return p;
  }

  using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  static constexpr size_t kMaxLayouts = 4096;
  WriteFn write32_ = nullptr;
  uint32_t* done_host_ = nullptr;  // finish()'s ticket word, mapped, and its device alias
  uint32_t* done_dev_ = nullptr;
  uint32_t done_ticket_ = 0;  // under done_mu_
  std::mutex done_mu_;
  char* words_host_ = nullptr;  // the ready words' page (map_words) and its device alias
  char* words_dev_ = nullptr;
  size_t words_bytes_ = 0;
  bool words_registered_ = false;  // by this mover (unregistered with it)
  const Method method_;
  const bool nonblocking_;
  const bool no_pools_;
  std::atomic<pack::ProxyQueue*> proxy_;  // dropped at its first failure
  const size_t proxy_max_;
  std::atomic<bool> pinned_warned_{false}, host_warned_{false};
  cudaStream_t stream_ = nullptr;
  unsigned* counters_ = nullptr;           // the fused signals' (pack::gpu_signal_counters)
  std::map<uintptr_t, char*> peer_words_;  // peers' ready pages: device address (null: none)
  pack::PinnedPool pinned_;
  pack::DevicePool scratch_;
  std::mutex mu_;
  int device_ = -1;  // the stream's
  std::map<std::tuple<const void*, int64_t, int64_t>,
           std::pair<type::NodePtr, std::shared_ptr<const pack::GpuLayout>>>
      layouts_;
};

}  // namespace

Result<std::unique_ptr<Mover>> make_gpu_mover(Method m, bool nonblocking, pack::ProxyQueue* proxy,
                                              size_t proxy_max) {
  if (!pack::gpu_available()) return Status(Err::kUnsupported, "no GPU");
  auto mover = std::make_unique<GpuMover>(m, nonblocking, proxy, proxy_max);
  LOOM_TRY(mover->init());
  return std::unique_ptr<Mover>(std::move(mover));
}

}  // namespace loom::transport
