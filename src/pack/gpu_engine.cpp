#include "pack/gpu_engine.hpp"

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pack/cuda/check.hpp"
#include "pack/cuda/dispatch.hpp"
#include "pack/cuda/policy.hpp"
#include "pack/free_gate.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::pack {

struct GpuLayout::Impl {
  gpu::Prepared prep;
  int device = 0;
  void* mem = nullptr;  // one allocation: segments, table, tiny bytes, blocks, prefix
  size_t mem_bytes = 0;
  LayoutView dview;

  // Through the free gate: a type freed while its enqueued operations are in
  // flight drops its layout on the stream progress thread.
  ~Impl() { FreeGate::get().release(FreeGate::Kind::kDevice, mem, device); }
};

namespace {

size_t round_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// Copies n bytes of `src` to offset *at of the device allocation `base` and
// returns where they landed; *at moves past them, keeping 256 B alignment.
// On a non-blocking stream of its own: cudaMemcpy would queue behind the
// legacy stream, which waits for every blocking stream, and Loom's stream
// thread makes layouts while an application's stream waits for it.
Status upload(char* base, size_t* at, const void* src, size_t n, const void** where,
              cudaStream_t s) {
  *where = nullptr;
  if (n == 0) return Status::ok();
  LOOM_CUDA_TRY(cudaMemcpyAsync(base + *at, src, n, cudaMemcpyHostToDevice, s));
  LOOM_CUDA_TRY(cudaStreamSynchronize(s));
  *where = base + *at;
  *at += round_up(n, 256);
  return Status::ok();
}

}  // namespace

GpuLayout::GpuLayout(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuLayout::GpuLayout(GpuLayout&&) noexcept = default;
GpuLayout& GpuLayout::operator=(GpuLayout&&) noexcept = default;
GpuLayout::~GpuLayout() = default;

Result<GpuLayout> GpuLayout::create(const Layout& l) {
  return create(l.view());
}

Result<GpuLayout> GpuLayout::create(const LayoutView& l) {
  if (!gpu_available()) return Status(Err::kUnsupported, "no usable CUDA device");
  auto impl = std::make_unique<Impl>();
  LOOM_CUDA_TRY(cudaGetDevice(&impl->device));
  gpu::DeviceShape shape;
  LOOM_TRY(gpu::read_device_shape(impl->device, &shape));
  impl->prep = gpu::prepare(l, shape);
  impl->dview = l;
  impl->dview.blocks = nullptr;
  impl->dview.prefix = nullptr;

  const gpu::Prepared& p = impl->prep;
  const size_t seg_n = p.seg_list.size() * sizeof(gpu::Seg);
  const size_t tab_n = p.table.size() * sizeof(int32_t);
  const size_t tiny_n = p.tiny.size() * sizeof(gpu::TinyByte);
  const bool arrays = p.kind == LayoutKind::kBlocks && l.blocks && l.prefix;
  const size_t blk_n = arrays ? static_cast<size_t>(l.nblocks) * sizeof(Block) : 0;
  const size_t pre_n = arrays ? static_cast<size_t>(l.nblocks + 1) * sizeof(int64_t) : 0;
  const size_t need = round_up(seg_n, 256) + round_up(tab_n, 256) + round_up(tiny_n, 256) +
                      round_up(blk_n, 256) + round_up(pre_n, 256);
  const void* segs = nullptr;
  const void* table = nullptr;
  const void* tiny = nullptr;
  if (need > 0) {
    LOOM_DEBUG(kPack, "GPU layout: %zu bytes of tables", need);
    LOOM_CUDA_TRY(cudaMalloc(&impl->mem, need));
    impl->mem_bytes = need;
    char* base = static_cast<char*>(impl->mem);
    size_t at = 0;
    const void* blocks = nullptr;
    const void* prefix = nullptr;
    cudaStream_t s = nullptr;
    LOOM_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Status up = [&]() -> Status {
      LOOM_TRY(upload(base, &at, p.seg_list.data(), seg_n, &segs, s));
      LOOM_TRY(upload(base, &at, p.table.data(), tab_n, &table, s));
      LOOM_TRY(upload(base, &at, p.tiny.data(), tiny_n, &tiny, s));
      LOOM_TRY(upload(base, &at, l.blocks, blk_n, &blocks, s));
      return upload(base, &at, l.prefix, pre_n, &prefix, s);
    }();
    cudaStreamDestroy(s);
    LOOM_TRY(up);
    impl->dview.blocks = static_cast<const Block*>(blocks);
    impl->dview.prefix = static_cast<const int64_t*>(prefix);
  }
  impl->prep.bind(static_cast<const gpu::Seg*>(segs), static_cast<const int32_t*>(table),
                  static_cast<const gpu::TinyByte*>(tiny));
  // The kernels read the device copies; the host ones are no longer needed.
  impl->prep.seg_list = {};
  impl->prep.table = {};
  impl->prep.tiny = {};
  return GpuLayout(std::move(impl));
}

LayoutKind GpuLayout::kind() const {
  return impl_ ? impl_->prep.kind : LayoutKind::kEmpty;
}
int64_t GpuLayout::total() const {
  return impl_ ? impl_->prep.total : 0;
}
int GpuLayout::device() const {
  return impl_ ? impl_->device : -1;
}
size_t GpuLayout::device_bytes() const {
  return impl_ ? impl_->mem_bytes : 0;
}
LayoutView GpuLayout::device_view() const {
  return impl_ ? impl_->dview : LayoutView{};
}
const gpu::Prepared& GpuLayout::prepared() const {
  return impl_->prep;
}

std::string GpuLayout::describe() const {
  if (!impl_) return "gpu layout: none";
  const gpu::Prepared& p = impl_->prep;
  char buf[256];
  // Segment pieces per class (long/short/tiny) and each class's group width.
  const gpu::SegGeom& g = p.segs.geom;
  std::snprintf(buf, sizeof buf,
                "gpu layout on device %d: %lld B, %lld units of %lld B, align %d, "
                "segments pieces=%lld/%lld/%lld lanes=%d/%d/%d, table %s, %zu B on device",
                impl_->device, static_cast<long long>(p.total), static_cast<long long>(p.nunits),
                static_cast<long long>(p.unit_len), p.layout_align,
                static_cast<long long>(g.cls[0].nitems), static_cast<long long>(g.cls[1].nitems),
                static_cast<long long>(g.cls[2].nitems), g.cls[0].lanes, g.cls[1].lanes,
                g.cls[2].lanes, p.has_table ? "yes" : "no", impl_->mem_bytes);
  return buf;
}

bool gpu_available() {
  // Asked once: the answer cannot change within a process.
  static const bool ok = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return n > 0;
  }();
  return ok;
}

namespace {

// The launch of one pack or unpack (kind kNone when there is nothing to move).
Status plan_run(const GpuLayout& l, const void* user, const void* packed, bool pack,
                gpu::Launch* out) {
  out->kind = gpu::KernelKind::kNone;
  if (l.total() == 0) return Status::ok();  // also a moved-from layout
  if (!user || !packed) return Status(Err::kInvalidArg, "gpu pack/unpack: null buffer");
  const gpu::Prepared& p = l.prepared();
  if (p.kind == LayoutKind::kBlocks) {  // its arrays live on one device
    int dev = 0;
    LOOM_CUDA_TRY(cudaGetDevice(&dev));
    if (dev != l.device())
      return Status(Err::kInvalidArg, "gpu layout made on device " + std::to_string(l.device()) +
                                          " used on device " + std::to_string(dev));
  }
  *out = gpu::plan(p, user, packed, pack);
  return Status::ok();
}

Status run(const GpuLayout& l, const void* user, const void* packed, bool pack,
           cudaStream_t stream) {
  gpu::Launch launch;
  LOOM_TRY(plan_run(l, user, packed, pack, &launch));
  return gpu::launch(launch, stream);
}

}  // namespace

Status gpu_preload() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    cudaStream_t s = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
      cudaGetLastError();
      result = Status(Err::kCuda, std::string("preload stream: ") + cudaGetErrorString(e));
      return;
    }
    result = gpu::preload(s);
    cudaStreamDestroy(s);
  });
  return result;
}

Status gpu_pack(const GpuLayout& l, const void* user, void* packed, cudaStream_t stream) {
  return run(l, user, packed, true, stream);
}

Status gpu_unpack(const GpuLayout& l, const void* packed, void* user, cudaStream_t stream) {
  return run(l, user, packed, false, stream);
}

Status gpu_transfer(const GpuLayout& from, const void* src, const GpuLayout& to, void* dst,
                    cudaStream_t stream) {
  if (!src || !dst) return Status(Err::kInvalidArg, "gpu transfer: null buffer");
  if (from.total() == 0 && to.total() == 0) return Status::ok();
  int dev = 0;
  LOOM_CUDA_TRY(cudaGetDevice(&dev));
  if (dev != from.device() || dev != to.device())
    return Status(Err::kInvalidArg, "gpu transfer: layouts of another device");
  gpu::Launch l;
  if (!gpu::plan_transfer(from.prepared(), src, to.prepared(), dst, &l))
    return Status(Err::kUnsupported, "no transfer kernel for these layouts");
  return gpu::launch(l, stream);
}

bool gpu_transfer_possible(const GpuLayout& from, const void* src, const GpuLayout& to,
                           const void* dst) {
  gpu::Launch l;
  return src && dst && from.total() > 0 && from.device() == to.device() &&
         gpu::plan_transfer(from.prepared(), src, to.prepared(), const_cast<void*>(dst), &l);
}

Status gpu_pack_sync(const GpuLayout& l, const void* user, void* packed, cudaStream_t stream) {
  LOOM_TRY(gpu_pack(l, user, packed, stream));
  LOOM_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status gpu_unpack_sync(const GpuLayout& l, const void* packed, void* user, cudaStream_t stream) {
  LOOM_TRY(gpu_unpack(l, packed, user, stream));
  LOOM_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status gpu_run_many(const GpuJob* jobs, size_t n, cudaStream_t stream, const GpuSignal* then) {
  stats::Scope phase(stats::kLaunch);
  // Kept from call to call: a Launch is 1.4 KB, and a batch's array was
  // allocated and zeroed anew each call.
  thread_local std::vector<gpu::Launch> launches;
  if (launches.size() < n) launches.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!jobs[i].layout) return Status(Err::kInvalidArg, "gpu pack/unpack: null layout");
    if (jobs[i].into) {
      if (!jobs[i].user || !jobs[i].packed ||
          !gpu::plan_transfer(jobs[i].layout->prepared(), jobs[i].user, jobs[i].into->prepared(),
                              jobs[i].packed, &launches[i]))
        return Status(Err::kUnsupported, "no transfer kernel for these layouts");
      continue;
    }
    LOOM_TRY(plan_run(*jobs[i].layout, jobs[i].user, jobs[i].packed, jobs[i].pack, &launches[i]));
  }
  stats::Scope launch(stats::kLaunchOnly);
  if (!then || then->n == 0) return gpu::launch_many(launches.data(), static_cast<int>(n), stream);
  gpu::Tail t;
  t.words = then->words;
  t.values = then->values;
  t.n = static_cast<int>(then->n);
  t.counters = then->counters;
  t.written = then->written;
  return gpu::launch_many(launches.data(), static_cast<int>(n), stream, &t);
}

Result<unsigned*> gpu_signal_counters(cudaStream_t stream) {
  unsigned* c = nullptr;
  LOOM_TRY(gpu::alloc_tail_counters(&c, stream));
  return c;
}

Status gpu_signal_many(uint32_t* const* words, const uint32_t* values, size_t n,
                       cudaStream_t stream) {
  return gpu::signal_many(words, values, static_cast<int>(n), stream);
}

Status gpu_wait_many(const uint32_t* const* words, const uint32_t* values, size_t n,
                     cudaStream_t stream) {
  return gpu::wait_many(words, values, static_cast<int>(n), stream);
}

Status gpu_pull_small(const uint32_t* release, uint32_t value, const uint64_t* landed, void* dst,
                      size_t max, cudaStream_t stream) {
  return gpu::pull_small(release, value, landed, dst, max, stream);
}

size_t gpu_pull_small_max() {
  return gpu::kCopyBlockBytes * gpu::kPullSmallBlocks;
}

Status gpu_wait_published(const uint64_t* from, cudaStream_t stream) {
  return gpu::wait_published(from, stream);
}

Status gpu_copy_from(const uint64_t* from, uint64_t* near, void* dst, size_t max,
                     cudaStream_t stream) {
  if (max == 0) return Status::ok();
  return gpu::copy_from(from, near, dst, max, stream);
}

std::string gpu_plan(const GpuLayout& l, const void* user, const void* packed, bool pack) {
  if (l.total() == 0) return "none (empty)";
  return gpu::describe(gpu::plan(l.prepared(), user, packed, pack));
}

}  // namespace loom::pack
