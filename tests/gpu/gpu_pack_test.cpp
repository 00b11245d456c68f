// The GPU engine against the host engine, byte for byte: packed bytes equal
// host_pack's; unpack into a sentinel-filled buffer equals host_unpack's
// (data bytes written, gap bytes untouched). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.hpp"
#include "pack/gpu_engine.hpp"
#include "pack/host_engine.hpp"
#include "type/canonical.hpp"

namespace loom::pack {
namespace {

using test::layout_of;
using test::strided_tree;

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available()) GTEST_SKIP() << "no usable CUDA device"

std::string cuda_err(cudaError_t e, const char* what) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

#define RT_CUDA(call)                                  \
  do {                                                 \
    const cudaError_t e_ = (call);                     \
    if (e_ != cudaSuccess) return cuda_err(e_, #call); \
  } while (0)

// Device or mapped pinned host memory, freed on scope exit.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (host_)
      (void)cudaFreeHost(host_);
    else if (dev_)
      (void)cudaFree(dev_);
  }
  cudaError_t alloc_device(size_t n) { return cudaMalloc(&dev_, n ? n : 1); }
  cudaError_t alloc_mapped(size_t n) {
    cudaError_t e = cudaHostAlloc(&host_, n ? n : 1, cudaHostAllocMapped);
    if (e != cudaSuccess) return e;
    return cudaHostGetDevicePointer(&dev_, host_, 0);
  }
  unsigned char* dev() const { return static_cast<unsigned char*>(dev_); }
  unsigned char* host() const { return static_cast<unsigned char*>(host_); }

 private:
  void* dev_ = nullptr;
  void* host_ = nullptr;
};

struct Opts {
  int umis = 0;         // user pointer residue mod 16 (device allocations are 256-aligned)
  int pmis = 0;         // packed pointer offset
  bool mapped = false;  // packed buffer in mapped pinned host memory
  bool unpack = true;
  cudaStream_t stream = nullptr;
  const LayoutView* view = nullptr;  // make the GpuLayout from this view of l instead
};

// Packs and unpacks `l` on the GPU and compares with the host engine.
// Returns "" on success, else what went wrong (with the launch plan).
std::string roundtrip(const Layout& l, const Opts& o = {}) {
  auto gl = o.view ? GpuLayout::create(*o.view) : GpuLayout::create(l);
  if (!gl) return "GpuLayout::create: " + gl.status().message();
  const test::Span sp = test::span_of(l);
  const int64_t pad = 64;
  const size_t usize = static_cast<size_t>(sp.hi - sp.lo + 2 * pad);
  const int64_t uoff = pad - sp.lo + ((o.umis - (pad - sp.lo)) % 16 + 16) % 16;
  const size_t total = static_cast<size_t>(l.total);
  const size_t psize = total + 32;

  std::vector<unsigned char> huser(usize);
  test::fill_pattern(huser, static_cast<uint64_t>(l.total) * 31 + usize);
  Buffer duser, dpacked;
  RT_CUDA(duser.alloc_device(usize));
  RT_CUDA(cudaMemcpy(duser.dev(), huser.data(), usize, cudaMemcpyHostToDevice));
  if (o.mapped) {
    RT_CUDA(dpacked.alloc_mapped(psize));
    std::memset(dpacked.host(), 0xEE, psize);
  } else {
    RT_CUDA(dpacked.alloc_device(psize));
    RT_CUDA(cudaMemset(dpacked.dev(), 0xEE, psize));
  }
  const std::string where = " [" + l.describe() + "; " +
                            gpu_plan(gl.value(), duser.dev() + uoff, dpacked.dev() + o.pmis, true) +
                            "]";

  Status st = gpu_pack_sync(gl.value(), duser.dev() + uoff, dpacked.dev() + o.pmis, o.stream);
  if (!st) return "gpu_pack: " + st.message() + where;
  std::vector<unsigned char> want(psize, 0xEE), got(psize);
  host_pack(l, huser.data() + uoff, want.data() + o.pmis);
  if (o.mapped)
    std::memcpy(got.data(), dpacked.host(), psize);
  else
    RT_CUDA(cudaMemcpy(got.data(), dpacked.dev(), psize, cudaMemcpyDeviceToHost));
  std::string d = test::first_difference(got.data(), want.data(), psize);
  if (!d.empty()) return "pack: " + d + where;
  if (!o.unpack) return "";

  Buffer dout;
  RT_CUDA(dout.alloc_device(usize));
  RT_CUDA(cudaMemset(dout.dev(), 0x5A, usize));
  const std::string uwhere =
      " [" + l.describe() + "; " +
      gpu_plan(gl.value(), dout.dev() + uoff, dpacked.dev() + o.pmis, false) + "]";
  st = gpu_unpack_sync(gl.value(), dpacked.dev() + o.pmis, dout.dev() + uoff, o.stream);
  if (!st) return "gpu_unpack: " + st.message() + uwhere;
  std::vector<unsigned char> uwant(usize, 0x5A), ugot(usize);
  host_unpack(l, want.data() + o.pmis, uwant.data() + uoff);
  RT_CUDA(cudaMemcpy(ugot.data(), dout.dev(), usize, cudaMemcpyDeviceToHost));
  d = test::first_difference(ugot.data(), uwant.data(), usize);
  if (!d.empty()) return "unpack: " + d + uwhere;
  return "";
}

// loom-bench-gpu's "5 fields incl. 1000 B": {4, 8, 2, 16, 1000} B fields of a 1088 B struct.
type::NodePtr test_fields_tree() {
  std::vector<type::NodePtr> items = {type::make_dense(4, 0), type::make_dense(8, 8),
                                      type::make_dense(2, 16), type::make_dense(16, 32),
                                      type::make_dense(1000, 64)};
  return type::make_list(std::move(items));
}

const int64_t kBlockLens[] = {1, 2, 3, 4, 7, 8, 12, 16, 24, 32, 64, 100, 4096};

// Dims for an nd-dimensional strided object (nd - 1 strided dims around the
// block's own row); strides multiples of 16 or not.
std::vector<std::pair<int64_t, int64_t>> dims_for(int nd, int64_t block, bool stride16) {
  int64_t s = block + (stride16 ? 16 + (16 - block % 16) % 16 : (block % 2 ? 2 : 6));
  const int64_t counts[] = {3, 4, 3, 5, 2};
  std::vector<std::pair<int64_t, int64_t>> dims(static_cast<size_t>(nd));
  for (int d = nd - 1; d >= 0; --d) {
    const int64_t c = d == nd - 1 ? (block >= 1024 ? 5 : 67) : counts[d];
    dims[static_cast<size_t>(d)] = {c, s};
    s = s * c + (stride16 ? 48 : 5);
  }
  return dims;
}

TEST(GpuPack, StridedSweep1Dto5D) {
  SKIP_WITHOUT_GPU();
  for (int nd = 1; nd <= 5; ++nd)
    for (int64_t block : kBlockLens)
      for (bool s16 : {true, false}) {
        const Layout l = layout_of(strided_tree(block, dims_for(nd, block, s16)));
        SCOPED_TRACE(l.describe());
        ASSERT_EQ(roundtrip(l), "");
        ASSERT_EQ(roundtrip(l, {.umis = 3, .pmis = 5}), "");
        ASSERT_EQ(roundtrip(l, {.umis = 8, .pmis = 4}), "");
      }
}

std::vector<Layout> misalignment_layouts() {
  return {layout_of(strided_tree(1, {{500, 2}})),
          layout_of(strided_tree(3, {{400, 7}})),
          layout_of(strided_tree(8, {{400, 16}})),
          layout_of(strided_tree(12, {{30, 400}, {20, 16}})),
          layout_of(strided_tree(64, {{200, 128}})),
          layout_of(strided_tree(100, {{200, 200}})),
          layout_of(strided_tree(4096, {{9, 8192}})),
          layout_of(test::hand_tree(), 300, test::kHandExtent),
          layout_of(test::struct_tree(), 30),
          layout_of(test::particle_tree(), 300, test::kParticleExtent),
          layout_of(type::make_dense(10000, 3))};
}

TEST(GpuPack, MisalignedPointers) {
  SKIP_WITHOUT_GPU();
  for (const Layout& l : misalignment_layouts())
    for (int k = 1; k < 16; ++k) {
      SCOPED_TRACE(l.describe() + " offset " + std::to_string(k));
      ASSERT_EQ(roundtrip(l, {.umis = k, .pmis = 0}), "");
      ASSERT_EQ(roundtrip(l, {.umis = 0, .pmis = k}), "");
      ASSERT_EQ(roundtrip(l, {.umis = k, .pmis = k}), "");
      ASSERT_EQ(roundtrip(l, {.umis = k, .pmis = 16 - k}), "");
    }
}

TEST(GpuPack, IrregularHandTiled) {
  SKIP_WITHOUT_GPU();
  for (int64_t count : {1, 2, 3, 17, 1000, 100000, 400000}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const Layout l = layout_of(test::hand_tree(), count, test::kHandExtent);
    ASSERT_EQ(l.kind, LayoutKind::kBlocks);
    ASSERT_EQ(roundtrip(l), "");
    ASSERT_EQ(roundtrip(l, {.umis = 1, .pmis = 2}), "");
  }
  // Tiles placed by two dims (a 2D array of HAND elements).
  const Layout l2 =
      layout_of(type::make_strided(50, 100000, type::make_strided(70, 300, test::hand_tree())));
  ASSERT_EQ(roundtrip(l2), "");
}

TEST(GpuPack, StructLike) {
  SKIP_WITHOUT_GPU();
  for (int64_t count : {1, 5, 1000, 50000}) {
    SCOPED_TRACE("count " + std::to_string(count));
    ASSERT_EQ(roundtrip(layout_of(test::struct_tree(), count)), "");
    ASSERT_EQ(roundtrip(layout_of(test::particle_tree(), count, test::kParticleExtent)), "");
    ASSERT_EQ(roundtrip(layout_of(test::particle_tree(), count, test::kParticleExtent),
                        {.umis = 4, .pmis = 0}),
              "");
  }
  // Many distinct blocks in one tile (past the canonical form's expansion
  // limit, and long enough to go by segment list rather than word table).
  std::vector<type::NodePtr> items;
  for (int i = 0; i < 6000; ++i) items.push_back(type::make_dense(1 + (i * 37) % 300, i * 400));
  ASSERT_EQ(roundtrip(layout_of(type::make_list(std::move(items)), 3)), "");
}

// Tiles whose pieces fall in every class of the segments kernel (long by
// 16 or 32 lanes, short by 8, tiny by one lane), at every relative alignment
// of the two pointers, with the packed buffer in device and in mapped memory.
TEST(GpuPack, MixedPieceClasses) {
  SKIP_WITHOUT_GPU();
  std::vector<type::NodePtr> items;
  const int64_t lens[] = {4, 40, 1000, 2, 300, 17, 4096, 16, 255, 3};
  int64_t at = 0;
  for (int64_t len : lens) {
    items.push_back(type::make_dense(len, at + 1));
    at += len + 1 + len % 7;
  }
  const type::NodePtr t = type::make_list(std::move(items));
  const Layout fields = layout_of(test_fields_tree(), 20000, 1088);
  for (int64_t count : {1, 3, 777}) {
    const Layout l = layout_of(t, count, at + 5);
    for (int um = 0; um < 16; um += 3)
      for (int pm = 0; pm < 16; pm += 5) {
        SCOPED_TRACE("count " + std::to_string(count) + " user+" + std::to_string(um) + " packed+" +
                     std::to_string(pm));
        ASSERT_EQ(roundtrip(l, {.umis = um, .pmis = pm}), "");
      }
    ASSERT_EQ(roundtrip(l, {.umis = 1, .pmis = 2, .mapped = true}), "");
  }
  for (int um : {0, 2, 7})
    ASSERT_EQ(roundtrip(fields, {.umis = um, .pmis = 3 * um}), "") << "user+" << um;
}

TEST(GpuPack, RandomTrees) {
  SKIP_WITHOUT_GPU();
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    std::mt19937_64 rng(seed);
    const type::NodePtr t = test::random_tree(rng, 4);
    const int64_t count = 1 + static_cast<int64_t>(seed % 5) * static_cast<int64_t>(seed % 3 + 1);
    const Layout l = layout_of(t, count);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + type::to_string(t));
    ASSERT_EQ(
        roundtrip(l, {.umis = static_cast<int>(seed % 16), .pmis = static_cast<int>(seed % 3)}),
        "");
  }
}

// Many packs and unpacks in batch launches (gpu_run_many), of random types
// and both directions in one call, then their ready words: every byte
// against the host engine, gaps of the unpacked buffers untouched. `fused`:
// the words go with the jobs (GpuSignal), written by the last launch itself
// (a signal kernel past 64 words), with one set of counters for every run,
// which each launch must leave zero.
void batched_runs(bool fused) {
  unsigned* counters = nullptr;
  if (fused) {
    auto c = gpu_signal_counters(nullptr);
    ASSERT_TRUE(c) << c.status().message();
    counters = c.value();
  }
  for (int n : {1, 2, 9, 16, 17, 33, 40, 48, 49, 64, 100}) {
    SCOPED_TRACE("batch of " + std::to_string(n));
    std::vector<Layout> ls;
    std::vector<Result<GpuLayout>> gls;
    std::vector<std::vector<unsigned char>> huser, hpacked;
    std::vector<std::unique_ptr<Buffer>> duser, dpacked;
    std::vector<GpuJob> jobs;
    std::vector<int64_t> uoff;
    gls.reserve(static_cast<size_t>(n));  // jobs point into it
    for (int i = 0; i < n; ++i) {
      std::mt19937_64 rng(static_cast<uint64_t>(n * 1000 + i));
      ls.push_back(layout_of(test::random_tree(rng, 3), 1 + i % 4));
    }
    for (int i = 0; i < n; ++i) {
      const Layout& l = ls[i];
      gls.push_back(GpuLayout::create(l));
      ASSERT_TRUE(gls.back()) << gls.back().status().message();
      const test::Span sp = test::span_of(l);
      const size_t usize = static_cast<size_t>(sp.hi - sp.lo + 128);
      uoff.push_back(64 - sp.lo);
      huser.emplace_back(usize);
      test::fill_pattern(huser.back(), static_cast<uint64_t>(i) * 77 + usize);
      hpacked.emplace_back(static_cast<size_t>(l.total) + 16);
      test::fill_pattern(hpacked.back(), static_cast<uint64_t>(i) * 13 + 5);
      duser.push_back(std::make_unique<Buffer>());
      dpacked.push_back(std::make_unique<Buffer>());
      ASSERT_EQ(duser.back()->alloc_device(usize), cudaSuccess);
      ASSERT_EQ(dpacked.back()->alloc_device(hpacked.back().size()), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(duser.back()->dev(), huser.back().data(), usize, cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dpacked.back()->dev(), hpacked.back().data(), hpacked.back().size(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      jobs.push_back({&gls.back().value(), duser.back()->dev() + uoff.back(), dpacked.back()->dev(),
                      i % 3 != 1});  // every third unpacks
    }
    Buffer words;
    ASSERT_EQ(words.alloc_mapped(128 * sizeof(uint32_t)), cudaSuccess);
    std::memset(words.host(), 0, 128 * sizeof(uint32_t));
    std::vector<uint32_t*> wp;
    std::vector<uint32_t> vals;
    for (int i = 0; i < n; ++i) {
      wp.push_back(reinterpret_cast<uint32_t*>(words.dev()) + i);
      vals.push_back(static_cast<uint32_t>(1000 + i));
    }
    if (fused) {
      GpuSignal then;
      then.words = wp.data();
      then.values = vals.data();
      then.n = wp.size();
      then.counters = counters;
      ASSERT_TRUE(gpu_run_many(jobs.data(), jobs.size(), nullptr, &then));
    } else {
      ASSERT_TRUE(gpu_run_many(jobs.data(), jobs.size(), nullptr));
      ASSERT_TRUE(gpu_signal_many(wp.data(), vals.data(), wp.size(), nullptr));
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (size_t i = 0; i < wp.size(); ++i)
      EXPECT_EQ(reinterpret_cast<volatile uint32_t*>(words.host())[i], vals[i]);
    EXPECT_EQ(reinterpret_cast<volatile uint32_t*>(words.host())[n], 0u);  // no word past them
    if (fused) {
      std::vector<unsigned> left(64, 1);
      ASSERT_EQ(cudaMemcpy(left.data(), counters, 49 * sizeof(unsigned), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int i = 0; i < 49; ++i) EXPECT_EQ(left[i], 0u) << "counter " << i;
    }
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE("job " + std::to_string(i) + ": " + ls[i].describe());
      if (jobs[i].pack) {
        std::vector<unsigned char> want = hpacked[i], got(want.size());
        host_pack(ls[i], huser[i].data() + uoff[i], want.data());
        ASSERT_EQ(cudaMemcpy(got.data(), dpacked[i]->dev(), got.size(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        ASSERT_EQ(test::first_difference(got.data(), want.data(), got.size()), "");
      } else {
        std::vector<unsigned char> want = huser[i], got(want.size());
        host_unpack(ls[i], hpacked[i].data(), want.data() + uoff[i]);
        ASSERT_EQ(cudaMemcpy(got.data(), duser[i]->dev(), got.size(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        ASSERT_EQ(test::first_difference(got.data(), want.data(), got.size()), "");
      }
    }
  }
}

TEST(GpuPack, BatchedRunsMatchTheHostEngine) {
  SKIP_WITHOUT_GPU();
  batched_runs(false);
}

TEST(GpuPack, BatchedRunsWriteTheirWordsThemselves) {
  SKIP_WITHOUT_GPU();
  batched_runs(true);
}

// A run with no kernel to carry the words (a contiguous pack is a copy):
// with `written` asked, the words are left to the caller, untouched.
TEST(GpuPack, FusedWordsLeftToTheCallerWithoutAKernel) {
  SKIP_WITHOUT_GPU();
  auto c = gpu_signal_counters(nullptr);
  ASSERT_TRUE(c) << c.status().message();
  const Layout l = layout_of(strided_tree(4096, {}), 1);  // one contiguous block
  auto gl = GpuLayout::create(l);
  ASSERT_TRUE(gl) << gl.status().message();
  Buffer user, packed, words;
  ASSERT_EQ(user.alloc_device(4096), cudaSuccess);
  ASSERT_EQ(packed.alloc_device(4096), cudaSuccess);
  ASSERT_EQ(words.alloc_mapped(64), cudaSuccess);
  std::memset(words.host(), 0, 64);
  uint32_t* w = reinterpret_cast<uint32_t*>(words.dev());
  const uint32_t v = 7;
  GpuJob j{&gl.value(), user.dev(), packed.dev(), true};
  bool written = true;
  GpuSignal then;
  then.words = &w;
  then.values = &v;
  then.n = 1;
  then.counters = c.value();
  then.written = &written;
  ASSERT_TRUE(gpu_run_many(&j, 1, nullptr, &then));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_FALSE(written) << gpu_plan(gl.value(), user.dev(), packed.dev(), true);
  EXPECT_EQ(reinterpret_cast<volatile uint32_t*>(words.host())[0], 0u);
}

// GpuLayouts made from repeat_view() (the runtime's per-call view).
TEST(GpuPack, FromRepeatView) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<type::NodePtr, int64_t>> elems = {
      {test::hand_tree(), test::kHandExtent},
      {strided_tree(8, {{4, 1024}}), 4096},
      {strided_tree(24, {{5, 100}}), 1000},
      {test::particle_tree(), test::kParticleExtent},
      {type::make_dense(12), 16}};
  for (const auto& [t, extent] : elems)
    for (int64_t count : {1, 3, 1000, 100000}) {
      const Layout one = layout_of(t);
      auto v = repeat_view(one, count, extent);
      ASSERT_TRUE(v.is_ok()) << v.status().message();
      const Layout l = layout_of(t, count, extent);
      SCOPED_TRACE(l.describe() + " count " + std::to_string(count));
      ASSERT_EQ(roundtrip(l, {.umis = 0, .pmis = 0, .view = &v.value()}), "");
      ASSERT_EQ(roundtrip(l, {.umis = 5, .pmis = 0, .view = &v.value()}), "");
    }
}

TEST(GpuPack, CountsSmallToLarge) {
  SKIP_WITHOUT_GPU();
  for (int64_t count : {1, 2, 5, 64, 1000, 65537, 1000000}) {
    SCOPED_TRACE("count " + std::to_string(count));
    // Adjacent columns (4 rows of a double) of a matrix wide enough for all
    // of them, so the elements never overlap.
    const type::NodePtr col = strided_tree(8, {{4, 8 * count + 64}});
    ASSERT_EQ(roundtrip(layout_of(col, count, 8)), "");
    ASSERT_EQ(roundtrip(layout_of(strided_tree(1, {{3, 2}}), count, 6)), "");
  }
}

// A few messages past 64 MiB: grid-stride loops and full grids.
TEST(GpuPack, LargeMessages) {
  SKIP_WITHOUT_GPU();
  const std::vector<Layout> ls = {
      layout_of(strided_tree(8, {{10000000, 16}})),                       // 80 MB of 8 B blocks
      layout_of(strided_tree(4096, {{20000, 8192}})),                     // 82 MB of 4 KiB rows
      layout_of(strided_tree(3, {{23000000, 5}})),                        // 69 MB of 3 B blocks
      layout_of(test::hand_tree(), 1200000, test::kHandExtent),           // 72 MB of HAND
      layout_of(strided_tree(8, {{64, 512 * 512 * 8}, {512, 512 * 8}})),  // x-face of 512^3 ... x64
      layout_of(strided_tree(100, {{700000, 256}}))};                     // 70 MB of 100 B rows
  for (const Layout& l : ls) {
    SCOPED_TRACE(l.describe());
    ASSERT_EQ(roundtrip(l), "");
  }
}

TEST(GpuPack, MappedPinnedPackedBuffer) {
  SKIP_WITHOUT_GPU();
  const std::vector<Layout> ls = {layout_of(strided_tree(8, {{100000, 16}})),
                                  layout_of(strided_tree(4096, {{300, 8192}})),
                                  layout_of(strided_tree(3, {{5000, 7}})),
                                  layout_of(test::hand_tree(), 20000, test::kHandExtent),
                                  layout_of(test::struct_tree(), 100),
                                  layout_of(type::make_dense(1 << 20))};
  for (const Layout& l : ls) {
    SCOPED_TRACE(l.describe());
    ASSERT_EQ(roundtrip(l, {.mapped = true}), "");
    ASSERT_EQ(roundtrip(l, {.umis = 0, .pmis = 3, .mapped = true}), "");
  }
}

TEST(GpuPack, ExplicitStream) {
  SKIP_WITHOUT_GPU();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(roundtrip(layout_of(test::hand_tree(), 5000, test::kHandExtent), {.stream = s}), "");
  EXPECT_EQ(roundtrip(layout_of(strided_tree(16, {{5000, 48}})), {.stream = s}), "");
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Several packs in flight at once on several streams (and host threads),
// sharing one GpuLayout each; then unpacks the same way.
TEST(GpuPack, ConcurrentStreams) {
  SKIP_WITHOUT_GPU();
  const std::vector<Layout> ls = {layout_of(strided_tree(8, {{2000000, 16}})),
                                  layout_of(test::hand_tree(), 200000, test::kHandExtent),
                                  layout_of(strided_tree(4096, {{2000, 8192}})),
                                  layout_of(strided_tree(3, {{1000000, 5}}))};
  constexpr int kStreams = 8;
  std::vector<GpuLayout> gls;
  for (const Layout& l : ls) {
    auto g = GpuLayout::create(l);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    gls.push_back(std::move(g.value()));
  }
  struct Job {
    size_t layout;
    std::vector<unsigned char> huser;
    int64_t uoff = 0;
    Buffer user, packed, out;
    cudaStream_t stream = nullptr;
  };
  std::vector<Job> jobs(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    Job& j = jobs[i];
    j.layout = static_cast<size_t>(i) % ls.size();
    const Layout& l = ls[j.layout];
    const test::Span sp = test::span_of(l);
    j.uoff = 16 - sp.lo;
    const size_t usize = static_cast<size_t>(sp.hi - sp.lo + 32);
    j.huser.resize(usize);
    test::fill_pattern(j.huser, static_cast<uint64_t>(i) + 1);
    ASSERT_EQ(j.user.alloc_device(usize), cudaSuccess);
    ASSERT_EQ(j.out.alloc_device(usize), cudaSuccess);
    ASSERT_EQ(j.packed.alloc_device(static_cast<size_t>(l.total)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(j.user.dev(), j.huser.data(), usize, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(j.out.dev(), 0x5A, usize), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&j.stream, cudaStreamNonBlocking), cudaSuccess);
  }
  // Enqueue from several host threads at once: the API is thread-safe.
  std::vector<std::thread> threads;
  std::vector<Status> results(kStreams);
  for (int i = 0; i < kStreams; ++i)
    threads.emplace_back([&, i] {
      Job& j = jobs[i];
      Status st = gpu_pack(gls[j.layout], j.user.dev() + j.uoff, j.packed.dev(), j.stream);
      if (st) st = gpu_unpack(gls[j.layout], j.packed.dev(), j.out.dev() + j.uoff, j.stream);
      results[i] = st;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(results[i].is_ok()) << results[i].message();
    ASSERT_EQ(cudaStreamSynchronize(jobs[i].stream), cudaSuccess);
  }
  for (int i = 0; i < kStreams; ++i) {
    Job& j = jobs[i];
    const Layout& l = ls[j.layout];
    SCOPED_TRACE("stream " + std::to_string(i) + ": " + l.describe());
    std::vector<unsigned char> want(static_cast<size_t>(l.total)), got(want.size());
    host_pack(l, j.huser.data() + j.uoff, want.data());
    ASSERT_EQ(cudaMemcpy(got.data(), j.packed.dev(), got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(test::first_difference(got.data(), want.data(), got.size()), "");
    std::vector<unsigned char> uwant(j.huser.size(), 0x5A), ugot(j.huser.size());
    host_unpack(l, want.data(), uwant.data() + j.uoff);
    ASSERT_EQ(cudaMemcpy(ugot.data(), j.out.dev(), ugot.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(test::first_difference(ugot.data(), uwant.data(), ugot.size()), "");
    EXPECT_EQ(cudaStreamDestroy(j.stream), cudaSuccess);
  }
}

TEST(GpuPack, EmptyLayoutAndBadArguments) {
  SKIP_WITHOUT_GPU();
  auto e = GpuLayout::create(Layout{});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_TRUE(gpu_pack_sync(e.value(), nullptr, nullptr, nullptr).is_ok());
  EXPECT_TRUE(gpu_unpack_sync(e.value(), nullptr, nullptr, nullptr).is_ok());
  auto g = GpuLayout::create(layout_of(strided_tree(8, {{10, 16}})));
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(gpu_pack(g.value(), nullptr, nullptr, nullptr).code(), Err::kInvalidArg);
  GpuLayout moved = std::move(g.value());
  EXPECT_EQ(moved.total(), 80);
  EXPECT_EQ(g->total(), 0);  // moved-from: packs nothing
  EXPECT_TRUE(gpu_pack(g.value(), nullptr, nullptr, nullptr).is_ok());
}

TEST(GpuPack, DeviceViewHoldsDeviceArrays) {
  SKIP_WITHOUT_GPU();
  const Layout l = layout_of(test::hand_tree(), 10, test::kHandExtent);
  auto g = GpuLayout::create(l);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  const LayoutView v = g->device_view();
  ASSERT_NE(v.blocks, nullptr);
  ASSERT_EQ(v.nblocks, 6);
  std::vector<Block> blocks(6);
  std::vector<int64_t> prefix(7);
  ASSERT_EQ(cudaMemcpy(blocks.data(), v.blocks, 6 * sizeof(Block), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(prefix.data(), v.prefix, 7 * sizeof(int64_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(blocks[i].off, l.blocks[i].off);
    EXPECT_EQ(blocks[i].len, l.blocks[i].len);
  }
  EXPECT_EQ(prefix, l.prefix);
  EXPECT_GT(g->device_bytes(), 0u);
  std::printf("%s\n", g->describe().c_str());
}

// More than 2^32 words (1-byte blocks): the 64-bit index paths. Needs ~13 GB
// of device memory and checks a pattern rather than the host engine.
TEST(GpuPack, Past32BitIndices) {
  SKIP_WITHOUT_GPU();
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  const int64_t n = (int64_t{1} << 32) + 4099;  // blocks of 1 B, stride 2
  const size_t usize = static_cast<size_t>(2 * n), psize = static_cast<size_t>(n);
  if (free_b < usize + psize + (size_t{2} << 30)) GTEST_SKIP() << "needs ~13 GB of free memory";
  const Layout l = layout_of(strided_tree(1, {{n, 2}}));
  auto g = GpuLayout::create(l);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  Buffer user, packed;
  ASSERT_EQ(user.alloc_device(usize), cudaSuccess);
  ASSERT_EQ(packed.alloc_device(psize), cudaSuccess);
  // user[i] = pattern[i % P] with P odd, so packed[j] = pattern[(2j) % P].
  const size_t P = 1000003, chunk = P * 64;
  std::vector<unsigned char> pat(P), big(chunk);
  test::fill_pattern(pat, 99);
  for (size_t i = 0; i < chunk; ++i) big[i] = pat[i % P];
  for (size_t at = 0; at < usize; at += chunk)
    ASSERT_EQ(cudaMemcpy(user.dev() + at, big.data(), std::min(chunk, usize - at),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  std::printf("%s\n", gpu_plan(g.value(), user.dev(), packed.dev(), true).c_str());
  ASSERT_TRUE(gpu_pack_sync(g.value(), user.dev(), packed.dev(), nullptr).is_ok());
  std::vector<unsigned char> got(chunk);
  for (size_t at = 0; at < psize; at += chunk) {
    const size_t m = std::min(chunk, psize - at);
    ASSERT_EQ(cudaMemcpy(got.data(), packed.dev() + at, m, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t k = (2 * at) % P;  // pattern index of packed byte at + j, stepped by 2
    for (size_t j = 0; j < m; ++j, k = k + 2 >= P ? k + 2 - P : k + 2)
      ASSERT_EQ(got[j], pat[k]) << "packed byte " << at + j;
  }
  // Unpack back over a zeroed buffer: odd bytes stay zero.
  ASSERT_EQ(cudaMemset(user.dev(), 0, usize), cudaSuccess);
  ASSERT_TRUE(gpu_unpack_sync(g.value(), packed.dev(), user.dev(), nullptr).is_ok());
  const size_t tail = usize - chunk;  // check the far end, past 2^32 words
  ASSERT_EQ(cudaMemcpy(got.data(), user.dev() + tail, chunk, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < chunk; ++i)
    ASSERT_EQ(got[i], (tail + i) % 2 ? 0 : pat[(tail + i) % P]) << "user byte " << tail + i;
}

TEST(GpuNoDevice, CreateFailsCleanly) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present";
  auto g = GpuLayout::create(layout_of(strided_tree(8, {{10, 16}})));
  EXPECT_FALSE(g.is_ok());
}

}  // namespace
}  // namespace loom::pack
