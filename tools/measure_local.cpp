// loom-measure, terms of one process (rank 0): the pack and unpack kernels
// by block length and size, and the pinned copies. Times are wall clock
// around the synchronous call, which is what the runtime pays per message.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "measure.hpp"
#include "pack/host_engine.hpp"
#include "pack/layout.hpp"
#include "type/canonical.hpp"
#include "type/ir.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "pack/gpu_engine.hpp"
#endif

namespace loom::tools::measure {
namespace {

[[noreturn]] void fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "loom-measure: %s: %s\n", what, why.c_str());
  PMPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

#ifdef LOOM_HAVE_CUDA
void check(const Status& s, const char* what) {
  if (!s.is_ok()) fail(what, s.message());
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(what, cudaGetErrorString(e));
}
#endif

// 2D vector layout: `bytes` packed bytes in blocks of `block`, every other
// block (stride 2 x block), as an application's halo column would be.
pack::Layout vector_layout(int64_t block, int64_t bytes) {
  auto t = type::make_strided(bytes / block, 2 * block, type::make_dense(block));
  auto l = pack::make_layout(type::canonicalize(t));
  if (!l) fail("layout", l.status().message());
  return l.value();
}

// Buffers for the local terms: the user buffer a layout reads from, device
// scratch, and pinned host memory mapped for kernels (in host mode all of
// them plain host memory).
struct Buffers {
  bool host = true;
  size_t user_bytes = 0, packed_bytes = 0;
  void* user = nullptr;
  void* scratch = nullptr;
  void* pinned = nullptr;      // host address
  void* pinned_dev = nullptr;  // the same memory as kernels address it

  Buffers(bool host_mode, size_t packed) : host(host_mode), packed_bytes(packed) {
    user_bytes = 2 * packed;
    if (host) {
      // Touched now so that page faults stay out of the samples.
      user = std::calloc(user_bytes, 1);
      scratch = std::calloc(packed, 1);
      pinned = pinned_dev = std::calloc(packed, 1);
      if (!user || !scratch || !pinned) fail("allocation", "out of memory");
      std::memset(user, 1, user_bytes);
      std::memset(scratch, 2, packed);
      std::memset(pinned, 3, packed);
      return;
    }
#ifdef LOOM_HAVE_CUDA
    check(cudaMalloc(&user, user_bytes), "cudaMalloc");
    check(cudaMalloc(&scratch, packed), "cudaMalloc");
    check(cudaHostAlloc(&pinned, packed, cudaHostAllocMapped), "cudaHostAlloc");
    check(cudaHostGetDevicePointer(&pinned_dev, pinned, 0), "cudaHostGetDevicePointer");
    check(cudaMemset(user, 1, user_bytes), "cudaMemset");
    check(cudaMemset(scratch, 2, packed), "cudaMemset");
    std::memset(pinned, 3, packed);
#endif
  }
  ~Buffers() {
    if (host) {
      std::free(user);
      std::free(scratch);
      std::free(pinned);
      return;
    }
#ifdef LOOM_HAVE_CUDA
    cudaFree(user);
    cudaFree(scratch);
    cudaFreeHost(pinned);
#endif
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
};

struct Point {
  int64_t block = 0, bytes = 0;
  pack::Layout layout;
#ifdef LOOM_HAVE_CUDA
  std::unique_ptr<pack::GpuLayout> gpu;
#endif
};

enum Dir { kPack, kUnpack };

// One surface: every (block, size) point of the grid, packing into or
// unpacking out of `packed` (device scratch, or pinned host memory).
model::Surface measure_surface(const Ctx& c, const std::vector<Point>& points, const Buffers& b,
                               void* packed, Dir dir) {
  model::Surface s;
#ifdef LOOM_HAVE_CUDA
  cudaStream_t stream = nullptr;
  if (!c.host_mode) check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
#endif
  for (const Point& pt : points) {
    auto op = [&] {
      if (c.host_mode) {
        if (dir == kPack)
          pack::host_pack(pt.layout, b.user, packed);
        else
          pack::host_unpack(pt.layout, packed, b.user);
        return;
      }
#ifdef LOOM_HAVE_CUDA
      check(dir == kPack ? pack::gpu_pack_sync(*pt.gpu, b.user, packed, stream)
                         : pack::gpu_unpack_sync(*pt.gpu, packed, b.user, stream),
            "gpu pack");
#endif
    };
    Stats st = sample_local(c.reps, op);
    const double block = static_cast<double>(pt.block);
    if (s.block.empty() || s.block.back() != block) {
      s.block.push_back(block);
      s.by_block.emplace_back();
    }
    append(s.by_block.back(), static_cast<double>(pt.bytes), st);
  }
#ifdef LOOM_HAVE_CUDA
  if (stream) cudaStreamDestroy(stream);
#endif
  return s;
}

// d2h or h2d: a copy between device scratch and pinned host memory, or
// memcpy in host mode.
model::Curve measure_copy(const Ctx& c, const Buffers& b, bool to_host) {
  model::Curve curve;
#ifdef LOOM_HAVE_CUDA
  cudaStream_t stream = nullptr;
  if (!c.host_mode) check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
#endif
  for (double bytes : c.grid.copy_sizes) {
    const size_t n = static_cast<size_t>(bytes);
    auto op = [&] {
      if (c.host_mode) {
        if (to_host)
          std::memcpy(b.pinned, b.scratch, n);
        else
          std::memcpy(b.scratch, b.pinned, n);
        return;
      }
#ifdef LOOM_HAVE_CUDA
      check(to_host ? cudaMemcpyAsync(b.pinned, b.scratch, n, cudaMemcpyDeviceToHost, stream)
                    : cudaMemcpyAsync(b.scratch, b.pinned, n, cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
#endif
    };
    append(curve, bytes, sample_local(c.reps, op));
  }
#ifdef LOOM_HAVE_CUDA
  if (stream) cudaStreamDestroy(stream);
#endif
  return curve;
}

}  // namespace

void measure_local(const Ctx& c, model::Profile& p) {
  if (c.rank != 0) {
    wait_for_peer(c);
    return;
  }
  const Grid& g = c.grid;
  size_t most = 0;
  for (double v : g.pack_sizes) most = std::max(most, static_cast<size_t>(v));
  for (double v : g.copy_sizes) most = std::max(most, static_cast<size_t>(v));
  Buffers b(c.host_mode, most);

  // Blocks outer, sizes inner: the order Surface keeps its curves in. A
  // block as long as the message is a contiguous copy, not this layout.
  std::vector<Point> points;
  for (double bl : g.blocks)
    for (double n : g.pack_sizes) {
      if (bl >= n) continue;
      Point pt;
      pt.block = static_cast<int64_t>(bl);
      pt.bytes = static_cast<int64_t>(n);
      pt.layout = vector_layout(pt.block, pt.bytes);
#ifdef LOOM_HAVE_CUDA
      if (!c.host_mode) {
        auto gl = pack::GpuLayout::create(pt.layout);
        check(gl.status(), "GpuLayout::create");
        pt.gpu = std::make_unique<pack::GpuLayout>(std::move(gl.value()));
      }
#endif
      points.push_back(std::move(pt));
    }

  const std::string range = std::to_string(points.size()) + " points, blocks " +
                            size_str(g.blocks.front()) + ".." + size_str(g.blocks.back()) + ", " +
                            size_str(g.pack_sizes.front()) + ".." + size_str(g.pack_sizes.back());
  struct SurfaceTerm {
    const char* name;
    void* packed;
    Dir dir;
  } surfaces[] = {{"pack_dev", b.scratch, kPack},
                  {"unpack_dev", b.scratch, kUnpack},
                  {"pack_host", b.pinned_dev, kPack},
                  {"unpack_host", b.pinned_dev, kUnpack}};
  for (const SurfaceTerm& t : surfaces) {
    const double t0 = now_us();
    p.surfaces[t.name] = measure_surface(c, points, b, t.packed, t.dir);
    progress(c, t.name, range, t0);
  }
  const std::string copies = size_str(g.copy_sizes.front()) + ".." + size_str(g.copy_sizes.back());
  for (bool to_host : {true, false}) {
    const double t0 = now_us();
    const char* name = to_host ? "d2h" : "h2d";
    p.curves[name] = measure_copy(c, b, to_host);
    progress(c, name, copies, t0);
  }
  release_peer(c);
}

}  // namespace loom::tools::measure
