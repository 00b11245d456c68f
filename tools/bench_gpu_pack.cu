// loom-bench-gpu: GPU pack throughput and small-message latency, with the
// baselines run in the same process on the same device:
//   D2D    cudaMemcpyAsync of the packed size (the bandwidth bound),
//   2D/3D  cudaMemcpy2DAsync / cudaMemcpy3DAsync where the layout fits one,
//   per-block  one cudaMemcpyAsync per block (irregular cases; timed on a
//          prefix of the blocks and extrapolated, as labelled).
// GPU times are CUDA-event medians over many repetitions after a warm-up.
// Buffers rotate through at least 4x the L2 where memory allows; rows whose
// working set still fits in L2 are marked "L2".
//
// With --floors: what a message's copies cost at least, each synchronised
// (the bounds of point-to-point latency, docs/results/p2p-*.md).
//
//   loom-bench-gpu [--quick] [--only SUBSTRING] [--floors]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pack/gpu_engine.hpp"
#include "pack/layout.hpp"
#include "pack/proxy_queue.hpp"
#include "type/canonical.hpp"
#include "type/ir.hpp"

namespace {

namespace cli = loom::tools::cli;

using loom::pack::GpuLayout;
using loom::pack::Layout;
using loom::pack::LayoutKind;
using loom::type::NodePtr;

void check(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "loom-bench-gpu: %s failed at line %d: %s\n", what, line,
               cudaGetErrorString(e));
  std::exit(1);
}
#define CK(call) check((call), #call, __LINE__)

void check_status(const loom::Status& s, const char* what) {
  if (s.is_ok()) return;
  std::fprintf(stderr, "loom-bench-gpu: %s: %s\n", what, s.message().c_str());
  std::exit(1);
}

__global__ void empty_kernel() {}

// A plain grid-stride copy of 16-byte words (n a multiple of 16).
__global__ void copy_kernel(uint4* dst, const uint4* src, size_t words) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < words;
       i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

struct Options {
  bool quick = false;
  bool floors = false;
  int l2_fetch = -1;  // cudaLimitMaxL2FetchGranularity to set, bytes (-1: leave)
  std::string only;
  double budget_s = 0.25;  // GPU time per measured column
  int max_reps = 201;
};

// ---- layouts -----------------------------------------------------------------

Layout layout_from(const NodePtr& t, int64_t count = 1, int64_t extent = 0) {
  NodePtr form = loom::type::canonicalize(t);
  if (extent == 0 && form) extent = form->hi - form->lo;
  auto l = loom::pack::make_layout(count == 1 ? form : loom::type::repeat(form, count, extent));
  if (!l) {
    std::fprintf(stderr, "make_layout: %s\n", l.status().message().c_str());
    std::exit(1);
  }
  return l.value();
}

NodePtr strided(int64_t block, const std::vector<std::pair<int64_t, int64_t>>& dims) {
  NodePtr n = loom::type::make_dense(block);
  for (size_t i = dims.size(); i-- > 0;)
    n = loom::type::make_strided(dims[i].first, dims[i].second, n);
  return n;
}

NodePtr list_of(const std::vector<std::pair<int64_t, int64_t>>& len_disp) {
  std::vector<NodePtr> items;
  for (auto [len, disp] : len_disp) items.push_back(loom::type::make_dense(len, disp));
  return loom::type::make_list(std::move(items));
}

// Byte range the layout touches, relative to the user pointer.
std::pair<int64_t, int64_t> span_of(const Layout& l) {
  int64_t lo = 0, hi = 0;
  for (const auto& d : l.dims) {
    lo += std::min<int64_t>(0, (d.count - 1) * d.stride);
    hi += std::max<int64_t>(0, (d.count - 1) * d.stride);
  }
  int64_t ulo = 0, uhi = 0;
  if (l.kind == LayoutKind::kContiguous) uhi = l.total;
  if (l.kind == LayoutKind::kStrided) uhi = l.block_len;
  if (l.kind == LayoutKind::kBlocks) {
    ulo = l.blocks[0].off;
    uhi = l.blocks[0].off + l.blocks[0].len;
    for (const auto& b : l.blocks) {
      ulo = std::min(ulo, b.off);
      uhi = std::max(uhi, b.off + b.len);
    }
  }
  return {l.base + lo + ulo, l.base + hi + uhi};
}

struct Case {
  std::string family;
  std::string name;
  Layout l;
};

// ---- timing ------------------------------------------------------------------

struct Bench {
  Options opt;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> ev;
  size_t l2 = 0;
  int sms = 1;

  // Median GPU microseconds of op(slot), slot rotating over nrot buffers.
  double median_us(const std::function<void(int)>& op, int nrot) {
    for (int i = 0; i < 3; ++i) op(i % nrot);
    CK(cudaStreamSynchronize(stream));
    auto run = [&](int reps) {
      for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(ev[2 * r], stream));
        op(r % nrot);
        CK(cudaEventRecord(ev[2 * r + 1], stream));
      }
      CK(cudaStreamSynchronize(stream));
      std::vector<double> t(static_cast<size_t>(reps));
      for (int r = 0; r < reps; ++r) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
        t[static_cast<size_t>(r)] = ms * 1e3;
      }
      std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
      return t[static_cast<size_t>(reps / 2)];
    };
    const double est = run(3);
    const int reps =
        std::clamp(static_cast<int>(opt.budget_s * 1e6 / std::max(est, 1.0)), 5, opt.max_reps) | 1;
    return run(reps);
  }
};

double gbps(int64_t bytes, double us) {
  return us > 0 ? bytes / (us * 1e3) : 0;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string size_str(int64_t n) {
  char b[32];
  if (n >= (int64_t{1} << 20) && n % (int64_t{1} << 20) == 0)
    std::snprintf(b, sizeof b, "%lld MiB", static_cast<long long>(n >> 20));
  else if (n >= 1024 && n % 1024 == 0)
    std::snprintf(b, sizeof b, "%lld KiB", static_cast<long long>(n >> 10));
  else if (n >= (int64_t{1} << 20))
    std::snprintf(b, sizeof b, "%.1f MiB", n / 1048576.0);
  else
    std::snprintf(b, sizeof b, "%lld B", static_cast<long long>(n));
  return b;
}

// The kernel part of gpu_plan's text, up to the first comma.
std::string kernel_of(const std::string& plan) {
  return plan.substr(0, plan.find(','));
}

void print_header_row() {
  cli::table(
      "| case | layout | packed | blocks | span / packed | kernel | Loom us | Loom GB/s | D2D GB/s "
      "| %% of D2D | 2D/3D GB/s | Loom / 2D | per-block GB/s | target | note |\n");
  cli::table("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

void run_case(Bench& b, const Case& c) {
  if (!b.opt.only.empty() && (c.family + " " + c.name).find(b.opt.only) == std::string::npos)
    return;
  const Layout& l = c.l;
  auto glr = GpuLayout::create(l);
  check_status(glr.status(), "GpuLayout::create");
  const GpuLayout& gl = glr.value();
  const auto [lo, hi] = span_of(l);
  const size_t uspan = static_cast<size_t>(hi - lo + 256) / 256 * 256;
  const size_t pspan = static_cast<size_t>(l.total + 256) / 256 * 256;
  const size_t foot = uspan + pspan;
  // Rotate over enough buffer sets to spill the L2 (up to 1.5 GiB in all).
  const size_t want = (4 * b.l2 + foot - 1) / foot;
  const size_t cap = std::max<size_t>(1, (size_t{3} << 29) / foot);
  const int nrot = static_cast<int>(std::clamp<size_t>(want, 1, std::min<size_t>(cap, 256)));
  const bool cached = static_cast<size_t>(nrot) * foot < 2 * b.l2;
  char* ubuf = nullptr;
  char* pbuf = nullptr;
  CK(cudaMalloc(&ubuf, uspan * nrot));
  CK(cudaMalloc(&pbuf, pspan * nrot));
  CK(cudaMemset(ubuf, 1, uspan * nrot));
  CK(cudaMemset(pbuf, 0, pspan * nrot));
  auto user = [&](int s) { return ubuf + uspan * s - lo; };
  auto packed = [&](int s) { return pbuf + pspan * s; };
  const size_t total = static_cast<size_t>(l.total);

  const double t_loom = b.median_us(
      [&](int s) {
        check_status(loom::pack::gpu_pack(gl, user(s), packed(s), b.stream), "gpu_pack");
      },
      nrot);
  const double t_d2d = b.median_us(
      [&](int s) {
        CK(cudaMemcpyAsync(packed(s), ubuf + uspan * s, total, cudaMemcpyDeviceToDevice, b.stream));
      },
      nrot);

  // cudaMemcpy2D/3D where one call expresses the layout. A baseline the
  // runtime refuses (e.g. a height it does not take) prints "err".
  double t_2d = -1;
  cudaError_t e_2d = cudaSuccess;
  auto note_err = [&](cudaError_t e) {
    if (e != cudaSuccess && e_2d == cudaSuccess) e_2d = e;
    if (e != cudaSuccess) (void)cudaGetLastError();
  };
  const auto& d = l.dims;
  if (l.kind == LayoutKind::kStrided && d.size() == 1 && d[0].stride >= l.block_len) {
    t_2d = b.median_us(
        [&](int s) {
          note_err(cudaMemcpy2DAsync(packed(s), l.block_len, user(s) + l.base, d[0].stride,
                                     l.block_len, d[0].count, cudaMemcpyDeviceToDevice, b.stream));
        },
        nrot);
  } else if (l.kind == LayoutKind::kStrided && d.size() == 2 && d[1].stride >= l.block_len &&
             d[0].stride > 0 && d[0].stride % d[1].stride == 0 &&
             d[0].stride / d[1].stride >= d[1].count) {
    t_2d = b.median_us(
        [&](int s) {
          cudaMemcpy3DParms p = {};
          p.srcPtr = make_cudaPitchedPtr(user(s) + l.base, d[1].stride, l.block_len,
                                         d[0].stride / d[1].stride);
          p.dstPtr = make_cudaPitchedPtr(packed(s), l.block_len, l.block_len, d[1].count);
          p.extent = make_cudaExtent(l.block_len, d[1].count, d[0].count);
          p.kind = cudaMemcpyDeviceToDevice;
          note_err(cudaMemcpy3DAsync(&p, b.stream));
        },
        nrot);
  }

  if (e_2d != cudaSuccess) {
    std::fprintf(stderr, "%s %s: 2D/3D baseline: %s\n", c.family.c_str(), c.name.c_str(),
                 cudaGetErrorString(e_2d));
    t_2d = -2;
  }

  // One cudaMemcpyAsync per block: a prefix of the blocks, scaled to all.
  double t_pb = -1;
  int64_t pb_timed = 0;
  if (l.kind == LayoutKind::kBlocks) {
    const int64_t nblocks = l.nblocks_total();
    pb_timed = std::min<int64_t>(nblocks, b.opt.quick ? 500 : 2000);
    const int64_t nb = static_cast<int64_t>(l.blocks.size());
    auto op = [&](int s) {
      int64_t done = 0;
      int64_t packed_at = 0;
      for (int64_t t = 0; done < pb_timed; ++t) {
        // Tile t of the innermost dim only: enough for a prefix.
        int64_t tile_off =
            loom::pack::dims_offset(l.dims.data(), static_cast<int>(l.dims.size()), t);
        for (int64_t k = 0; k < nb && done < pb_timed; ++k, ++done) {
          CK(cudaMemcpyAsync(packed(s) + packed_at, user(s) + l.base + tile_off + l.blocks[k].off,
                             l.blocks[k].len, cudaMemcpyDeviceToDevice, b.stream));
          packed_at += l.blocks[k].len;
        }
      }
    };
    t_pb = b.median_us(op, nrot) * static_cast<double>(nblocks) / static_cast<double>(pb_timed);
  }

  CK(cudaFree(ubuf));
  CK(cudaFree(pbuf));

  const double g_loom = gbps(l.total, t_loom), g_d2d = gbps(l.total, t_d2d);
  const double pct = g_d2d > 0 ? 100 * g_loom / g_d2d : 0;
  const std::string plan = kernel_of(loom::pack::gpu_plan(gl, user(0), packed(0), true));
  // Targets: >= 80% of D2D for blocks >= 64 B at >= 1 MiB; >= 2x the 2D copy
  // for blocks <= 32 B; irregular within 2x of D2D at >= 1 MiB.
  std::string target = "";
  const bool big = l.total >= (int64_t{1} << 20);
  if (l.kind == LayoutKind::kStrided && l.block_len >= 64 && big)
    target = pct >= 80 ? "ok (>=80% D2D)" : "MISS (<80% D2D)";
  else if (l.kind == LayoutKind::kStrided && l.block_len <= 32 && t_2d > 0)
    target = t_2d / t_loom >= 2 ? "ok (>=2x 2D)" : "MISS (<2x 2D)";
  else if (l.kind == LayoutKind::kBlocks && big)
    target = pct >= 50 ? "ok (>=50% D2D)" : "MISS (<50% D2D)";
  std::string note = cached ? "L2" : "";
  if (t_pb > 0 && pb_timed < l.nblocks_total())
    note += std::string(note.empty() ? "" : "; ") + "per-block est. from " +
            std::to_string(pb_timed) + " blocks";
  const std::string blocks =
      l.kind == LayoutKind::kStrided
          ? std::to_string(l.nblocks_total()) + " x " + std::to_string(l.block_len) + " B"
      : l.kind == LayoutKind::kBlocks
          ? std::to_string(l.nblocks_total()) + " (" + std::to_string(l.blocks.size()) + "/tile)"
          : "1";
  cli::table(
      "| %s | %s | %s | %s | %.2f | %s | %.1f | %.1f | %.1f | %.0f%% | %s | %s | %s | %s | %s |\n",
      c.family.c_str(), c.name.c_str(), size_str(l.total).c_str(), blocks.c_str(),
      static_cast<double>(hi - lo) / static_cast<double>(l.total), plan.c_str(), t_loom, g_loom,
      g_d2d, pct,
      t_2d > 0    ? fmt("%.1f", gbps(l.total, t_2d)).c_str()
      : t_2d < -1 ? "err"
                  : "n/a",
      t_2d > 0 ? fmt("%.1fx", t_2d / t_loom).c_str() : "n/a",
      t_pb > 0 ? fmt("%.2f", gbps(l.total, t_pb)).c_str() : "n/a", target.c_str(), note.c_str());
  std::fflush(stdout);
}

// ---- cases -------------------------------------------------------------------

std::vector<Case> make_cases(const Options& opt) {
  std::vector<Case> cs;
  // 2D objects: `rows` blocks of `block` bytes, stride 2x block.
  const std::vector<int64_t> totals =
      opt.quick ? std::vector<int64_t>{64 << 10, 16 << 20}
                : std::vector<int64_t>{1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20};
  const std::vector<int64_t> blocks =
      opt.quick ? std::vector<int64_t>{1, 8, 32, 64, 4096}
                : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  for (int64_t t : totals)
    for (int64_t bl : blocks) {
      if (bl > t) continue;
      cs.push_back({"2d", "block " + std::to_string(bl) + " B, stride " + std::to_string(2 * bl),
                    layout_from(strided(bl, {{t / bl, 2 * bl}}))});
    }
  // TEMPI's MPI_Pack shapes (its bench-mpi-pack): blocks of 1-8 B every
  // 512 B, 1 and 4 MiB packed; tools/peers/torch_pack.py times PyTorch on them.
  for (int64_t t : {int64_t{1} << 20, int64_t{4} << 20})
    for (int64_t bl : {1, 2, 4, 8})
      cs.push_back({"tempi", "block " + std::to_string(bl) + " B, stride 512, " + size_str(t),
                    layout_from(strided(bl, {{t / bl, 512}}))});
  // Rows of 1000 B (1000 B of each 1088 B record): 8-byte words at most, and
  // every other row sits 8 bytes off its packed place modulo 16, so the
  // segments kernel moves them, half with its shifted copy.
  cs.push_back(
      {"rows", "1000 B of 1088 B records x 20000", layout_from(strided(1000, {{20000, 1088}}))});
  // 3D halo faces of an N^3 grid of doubles (depth-1 faces, and a depth-3 x face).
  for (int64_t n : opt.quick ? std::vector<int64_t>{256} : std::vector<int64_t>{128, 256, 512}) {
    const int64_t row = n * 8, plane = n * n * 8;
    const std::string g = std::to_string(n) + "^3 doubles";
    cs.push_back({"3d halo", "x face, " + g, layout_from(strided(8, {{n, plane}, {n, row}}))});
    cs.push_back(
        {"3d halo", "x face depth 3, " + g, layout_from(strided(24, {{n, plane}, {n, row}}))});
    cs.push_back({"3d halo", "y face, " + g, layout_from(strided(row, {{n, plane}}))});
    cs.push_back({"3d halo", "z face, " + g, layout_from(loom::type::make_dense(plane))});
  }
  // The HAND indexed case, tiled.
  const NodePtr hand = list_of({{8, 4}, {8, 40}, {8, 72}, {8, 104}, {12, 160}, {16, 224}});
  for (int64_t bytes : opt.quick ? std::vector<int64_t>{1 << 20}
                                 : std::vector<int64_t>{1 << 20, 16 << 20, 128 << 20}) {
    const int64_t count = (bytes + 59) / 60;
    cs.push_back({"irregular", "HAND x " + std::to_string(count), layout_from(hand, count, 240)});
  }
  // indexed_block: equal blocks at irregular displacements (seeded), tiled.
  for (int64_t bl : {8, 64}) {
    std::mt19937_64 rng(42);
    std::vector<std::pair<int64_t, int64_t>> items;
    int64_t at = 0;
    for (int i = 0; i < 64; ++i) {
      items.push_back({bl, at});
      at += bl * (1 + static_cast<int64_t>(rng() % 4));
    }
    const int64_t count = (opt.quick ? (4 << 20) : (64 << 20)) / (64 * bl);
    cs.push_back({"irregular",
                  "indexed_block 64 x " + std::to_string(bl) + " B, x " + std::to_string(count),
                  layout_from(list_of(items), count, at)});
  }
  // A 4D subarray: the inner half of every dim of a {16,32,64,128} float array,
  // and the same with only the 2 innermost floats of each row (8 B blocks).
  cs.push_back(
      {"4d subarray", "{8,16,32,64} of {16,32,64,128} floats",
       layout_from(strided(64 * 4, {{8, 32 * 64 * 128 * 4}, {16, 64 * 128 * 4}, {32, 128 * 4}}),
                   1)});
  cs.push_back(
      {"4d subarray", "{8,16,32,2} of {16,32,64,128} floats",
       layout_from(strided(2 * 4, {{8, 32 * 64 * 128 * 4}, {16, 64 * 128 * 4}, {32, 128 * 4}}))});
  // Particles: pos[3], mass, id of {double pos[3], vel[3]; float mass; int id; char kind}.
  const NodePtr particle = list_of({{24, 0}, {4, 48}, {4, 52}});
  for (int64_t n :
       opt.quick ? std::vector<int64_t>{1 << 20} : std::vector<int64_t>{1 << 16, 1 << 22})
    cs.push_back(
        {"struct", "particle {pos,mass,id} x " + std::to_string(n), layout_from(particle, n, 64)});
  // Five fields of mixed length, one long: segments rather than the word table.
  const NodePtr fields = list_of({{4, 0}, {8, 8}, {2, 16}, {16, 32}, {1000, 64}});
  cs.push_back({"struct", "5 fields incl. 1000 B x 20000", layout_from(fields, 20000, 1088)});
  return cs;
}

// ---- latency -----------------------------------------------------------------

double host_median_us(const std::function<void()>& op, int reps) {
  for (int i = 0; i < 20; ++i) op();
  std::vector<double> t(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    op();
    const auto z = std::chrono::steady_clock::now();
    t[static_cast<size_t>(r)] = std::chrono::duration<double, std::micro>(z - a).count();
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[static_cast<size_t>(reps / 2)];
}

void run_latency(Bench& b) {
  cli::table("\n## Small-message latency (host wall clock, launch to completion)\n\n");
  cli::table(
      "| message | packed | Loom pack + sync us | gpu_pack call alone us | "
      "empty kernel + sync us | memcpy D2D + sync us |\n");
  cli::table("|---|---|---|---|---|---|\n");
  const int reps = b.opt.quick ? 300 : 2000;
  const NodePtr hand = list_of({{8, 4}, {8, 40}, {8, 72}, {8, 104}, {12, 160}, {16, 224}});
  struct L {
    std::string name;
    Layout l;
  };
  std::vector<L> ls;
  for (int64_t rows : {1, 8, 64, 512})
    ls.push_back(
        {"2d 8 B blocks x " + std::to_string(rows), layout_from(strided(8, {{rows, 16}}))});
  for (int64_t count : {1, 16, 68})
    ls.push_back({"HAND x " + std::to_string(count), layout_from(hand, count, 240)});
  ls.push_back({"2d 4096 B block x 1", layout_from(strided(4096, {{1, 8192}}))});
  char* u = nullptr;
  char* p = nullptr;
  CK(cudaMalloc(&u, 1 << 20));
  CK(cudaMalloc(&p, 1 << 20));
  const double t_empty = host_median_us(
      [&] {
        empty_kernel<<<1, 1, 0, b.stream>>>();
        CK(cudaStreamSynchronize(b.stream));
      },
      reps);
  for (const L& x : ls) {
    auto glr = GpuLayout::create(x.l);
    check_status(glr.status(), "GpuLayout::create");
    const GpuLayout& gl = glr.value();
    const double t_loom = host_median_us(
        [&] {
          check_status(loom::pack::gpu_pack(gl, u + 4096, p, b.stream), "gpu_pack");
          CK(cudaStreamSynchronize(b.stream));
        },
        reps);
    const double t_call = host_median_us(
        [&] { check_status(loom::pack::gpu_pack(gl, u + 4096, p, b.stream), "gpu_pack"); }, reps);
    CK(cudaStreamSynchronize(b.stream));
    const double t_copy = host_median_us(
        [&] {
          CK(cudaMemcpyAsync(p, u, static_cast<size_t>(x.l.total), cudaMemcpyDeviceToDevice,
                             b.stream));
          CK(cudaStreamSynchronize(b.stream));
        },
        reps);
    cli::table("| %s | %s | %.2f | %.2f | %.2f | %.2f |\n", x.name.c_str(),
               size_str(x.l.total).c_str(), t_loom, t_call, t_empty, t_copy);
    std::fflush(stdout);
  }
  CK(cudaFree(u));
  CK(cudaFree(p));
}

// One synchronised copy of each kind a message may pay, host wall clock from
// the call to its completion, by size: the copy engines (cudaMemcpyAsync +
// cudaStreamSynchronize), the resident copy agent (LOOM_PROXY: a request in
// mapped memory, no CUDA call) and an empty kernel. Pinned host memory is
// mapped, so the agent reaches it too.
void run_floors(Bench& b) {
  cli::table("\n## Floors: one synchronised copy (host wall clock, median)\n\n");
  cli::table(
      "| size | memcpy D2D + sync us | memcpy D2D + ticket us | kernel D2D + ticket us | "
      "memcpy D2H + sync us | "
      "memcpy H2D + sync us | agent D2D us | agent D2H us | agent H2D us | "
      "empty kernel + sync us |\n");
  cli::table("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const int reps = b.opt.quick ? 300 : 2000;
  const size_t max = size_t{8} << 20;
  char *d0 = nullptr, *d1 = nullptr, *h = nullptr, *hd = nullptr;
  CK(cudaMalloc(&d0, max));
  CK(cudaMalloc(&d1, max));
  CK(cudaHostAlloc(&h, max + 64, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&hd), h, 0));
  CK(cudaMemset(d0, 1, max));
  // "+ ticket": the stream writes a word of mapped host memory after the copy
  // (cuStreamWriteValue32) and the host spins on it, in place of
  // cudaStreamSynchronize.
  using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult qr;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &qr));
  const auto write32 = reinterpret_cast<WriteFn>(fn);
  volatile uint32_t* flag = reinterpret_cast<volatile uint32_t*>(h + max);
  uint32_t* flag_dev = reinterpret_cast<uint32_t*>(hd + max);
  uint32_t ticket = 0;
  *flag = 0;
  auto wait_ticket = [&] {  // the stream writes the next ticket after its work; spin on it
    if (write32(reinterpret_cast<CUstream>(b.stream), reinterpret_cast<CUdeviceptr>(flag_dev),
                ++ticket, 0) != CUDA_SUCCESS)
      check(cudaErrorUnknown, "cuStreamWriteValue32", __LINE__);
    while (*flag != ticket) {
    }
  };
  auto agent = loom::pack::make_gpu_proxy(200 * 1000);
  check_status(agent.status(), "make_gpu_proxy");
  loom::pack::ProxyQueue& q = *agent.value();
  const double t_empty = host_median_us(
      [&] {
        empty_kernel<<<1, 1, 0, b.stream>>>();
        CK(cudaStreamSynchronize(b.stream));
      },
      reps);
  for (size_t n :
       {size_t{8}, size_t{32}, size_t{128}, size_t{2} << 10, size_t{32} << 10, size_t{128} << 10,
        size_t{512} << 10, size_t{2} << 20, size_t{4} << 20, size_t{8} << 20}) {
    auto memcpy_us = [&](void* dst, const void* src, cudaMemcpyKind k) {
      return host_median_us(
          [&] {
            CK(cudaMemcpyAsync(dst, src, n, k, b.stream));
            CK(cudaStreamSynchronize(b.stream));
          },
          reps);
    };
    auto agent_us = [&](void* dst, const void* src) {
      const int r = n > (size_t{512} << 10) ? std::max(20, reps / 20) : reps;  // one block copies
      return host_median_us([&] { check_status(q.copy(dst, src, n), "agent copy"); }, r);
    };
    const double dd = memcpy_us(d1, d0, cudaMemcpyDeviceToDevice);
    const double ddf = host_median_us(
        [&] {
          CK(cudaMemcpyAsync(d1, d0, n, cudaMemcpyDeviceToDevice, b.stream));
          wait_ticket();
        },
        reps);
    const size_t words = n / 16;
    const int grid = static_cast<int>(std::min<size_t>(std::max<size_t>(1, (words + 255) / 256),
                                                       size_t{4} * static_cast<size_t>(b.sms)));
    const double dkf = words == 0 ? 0.0
                                  : host_median_us(
                                        [&] {
                                          copy_kernel<<<grid, 256, 0, b.stream>>>(
                                              reinterpret_cast<uint4*>(d1),
                                              reinterpret_cast<const uint4*>(d0), words);
                                          wait_ticket();
                                        },
                                        reps);
    const double dh = memcpy_us(h, d0, cudaMemcpyDeviceToHost);
    const double hdv = memcpy_us(d1, h, cudaMemcpyHostToDevice);
    const double add = agent_us(d1, d0);
    const double adh = agent_us(hd, d0);
    const double ahd = agent_us(d1, hd);
    cli::table("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
               size_str(static_cast<int64_t>(n)).c_str(), dd, ddf, dkf, dh, hdv, add, adh, ahd,
               t_empty);
    std::fflush(stdout);
  }
  agent.value().reset();
  CK(cudaFree(d0));
  CK(cudaFree(d1));
  CK(cudaFreeHost(h));
}

const char* kUsage =
    "usage: loom-bench-gpu [--quick] [--only SUBSTRING] [--floors] [--l2-fetch BYTES] [--csv "
    "FILE]\n"
    "  Loom's GPU pack and unpack kernels on one GPU beside the device-to-device copy\n"
    "  bound, cudaMemcpy2D/3D and per-block copies; prints Markdown tables.\n"
    "  --quick           fewer repetitions\n"
    "  --only SUBSTRING  only the cases whose name holds SUBSTRING\n"
    "  --floors          only the floors: one synchronised copy of each kind by size\n"
    "  --l2-fetch BYTES  set the device's L2 fetch granularity first (0-128)\n"
    "  --csv FILE        also each table's rows as CSV: the first in FILE, the k-th in\n"
    "                    FILE with -k before its extension\n"
    "  -h, --help        this text\n"
    "example:\n"
    "  loom-bench-gpu --only 3D\n";

}  // namespace

int main(int argc, char** argv) {
  if (cli::help_asked(argc, argv)) return cli::print_help(kUsage);
  Options opt;
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += std::string(i ? " " : "") + argv[i];
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      opt.quick = true;
      opt.budget_s = 0.04;
      opt.max_reps = 51;
    } else if (!std::strcmp(argv[i], "--l2-fetch")) {
      if (i + 1 >= argc) return cli::usage_error("loom-bench-gpu", "--l2-fetch needs bytes");
      opt.l2_fetch = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--floors")) {
      opt.floors = true;
    } else if (!std::strcmp(argv[i], "--csv")) {
      if (i + 1 >= argc) return cli::usage_error("loom-bench-gpu", "--csv needs a file name");
      if (!cli::csv_tables(argv[++i])) {
        std::fprintf(stderr, "loom-bench-gpu: cannot write %s\n", argv[i]);
        return 1;
      }
    } else if (!std::strcmp(argv[i], "--only")) {
      if (i + 1 >= argc) return cli::usage_error("loom-bench-gpu", "--only needs a value");
      opt.only = argv[++i];
    } else {
      return cli::usage_error("loom-bench-gpu", std::string("unknown option ") + argv[i]);
    }
  }
  if (!loom::pack::gpu_available()) {
    std::fprintf(stderr, "loom-bench-gpu: no usable CUDA device\n");
    return 1;
  }
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop = {};
  CK(cudaGetDeviceProperties(&prop, dev));
  Bench b;
  b.opt = opt;
  b.l2 = static_cast<size_t>(prop.l2CacheSize);
  b.sms = prop.multiProcessorCount;
  CK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  b.ev.resize(2 * static_cast<size_t>(opt.max_reps));
  for (auto& e : b.ev) CK(cudaEventCreate(&e));

  if (opt.l2_fetch >= 0) CK(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, opt.l2_fetch));
  size_t l2_fetch = 0;
  CK(cudaDeviceGetLimit(&l2_fetch, cudaLimitMaxL2FetchGranularity));
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
  cli::table("# loom-bench-gpu: %s (%d SMs, L2 %zu MiB, fetch %zu B, %.0f GiB), %s, `%s`\n\n",
             prop.name, prop.multiProcessorCount, b.l2 >> 20, l2_fetch,
             prop.totalGlobalMem / 1073741824.0, date, cmd.c_str());
  cli::table(
      "GB/s = packed bytes / time. Times: median of CUDA-event-timed repetitions. "
      "D2D: cudaMemcpyAsync of the packed size (reads and writes it once: the bound). "
      "2D/3D: cudaMemcpy2DAsync/3DAsync where one call expresses the layout. per-block: "
      "one cudaMemcpyAsync per block. span / packed: user bytes spanned per packed byte "
      "(where gaps are narrower than a DRAM burst, pack must read the whole span, and "
      "the D2D bound is out of reach by about (span + packed) / (2 packed)). L2: the "
      "rotated buffers fit in L2.\n\n");
  if (opt.floors) {
    run_floors(b);
    for (auto& e : b.ev) CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(b.stream));
    return 0;
  }
  print_header_row();
  for (const Case& c : make_cases(opt)) run_case(b, c);
  if (opt.only.empty()) run_latency(b);

  for (auto& e : b.ev) CK(cudaEventDestroy(e));
  CK(cudaStreamDestroy(b.stream));
  return 0;
}
