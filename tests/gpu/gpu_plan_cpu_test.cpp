// CPU-only tests of the GPU engine's host/device shared code: fast division,
// the kernels' index math, the selection rules, and the kernels' agents run
// lane by lane on the host against host_pack / host_unpack. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "pack/cuda/policy.hpp"
#include "pack/host_engine.hpp"
#include "pack/pools.hpp"
#include "type/canonical.hpp"

namespace loom::pack::gpu {
namespace {

using test::layout_of;
using test::strided_tree;

// The kernels' work, item by item and lane by lane.
template <int W, class Args>
void emulate_words(const Args& a) {
  using T = typename WordOf<W>::T;
  for (int64_t g = 0; g < nwords_of(a); ++g) {
    const char* s;
    char* d;
    ends_of<W>(a, g, &s, &d);
    store_as<T>(d, load_as<T>(s));
  }
}

// A pack's or a transfer's words, by the launch's word width.
template <class Args>
void emulate_words_as(int word, const Args& a) {
  switch (word) {
    case 1:
      return emulate_words<1>(a);
    case 2:
      return emulate_words<2>(a);
    case 4:
      return emulate_words<4>(a);
    case 8:
      return emulate_words<8>(a);
    case 16:
      return emulate_words<16>(a);
  }
  FAIL() << "bad word width " << word;
}

void emulate(const Launch& l) {
  switch (l.kind) {
    case KernelKind::kNone:
      return;
    case KernelKind::kMemcpy:
      std::memmove(l.dst, l.src, static_cast<size_t>(l.bytes));
      return;
    case KernelKind::kWords:
      return emulate_words_as(l.word, l.words);
    case KernelKind::kSegments:
      for (int c = 0; c < kSegClasses; ++c) {
        const SegClass& k = l.segs.geom.cls[c];
        for (int64_t i = 0; i < k.nitems; ++i) {
          if (c == kTinyClass) {  // one byte per item
            const char* s;
            char* d;
            tiny_ends(l.segs, i, &s, &d);
            *d = static_cast<char>(load_as<unsigned char>(s));
          } else {
            for (int lane = 0; lane < k.lanes; ++lane) seg_move(l.segs, k, i, lane);
          }
        }
      }
      return;
    case KernelKind::kTransfer:  // plan() never makes one (emulate_transfer below)
      FAIL() << "a transfer from plan()";
      return;
  }
}

struct Outcome {
  std::string error;  // empty when pack and unpack matched the host engine
  KernelKind kind = KernelKind::kNone;
  int word = 0;
};

// Packs and unpacks `l` by emulation with the user and packed pointers
// misaligned by umis / pmis bytes (mod 16), and compares with the host engine.
// `view`: prepare from this view of the same layout instead (repeat_view).
Outcome check(const Layout& l, int umis, int pmis, const Policy& pol = {}, int lanes = 0,
              const LayoutView* view = nullptr) {
  Outcome out;
  Prepared p = view ? prepare(*view, DeviceShape{}, pol) : prepare(l, DeviceShape{}, pol);
  if (lanes > 0) {  // force the group width of the segments kernel's group classes
    for (int c = 0; c < kTinyClass; ++c) {
      p.segs.geom.cls[c].lanes = lanes;
      p.segs.geom.cls[c].lanes_log2 = 0;
      while ((1 << p.segs.geom.cls[c].lanes_log2) < lanes) ++p.segs.geom.cls[c].lanes_log2;
    }
  }
  const test::Span sp = test::span_of(l);
  const int64_t pad = 48;
  std::vector<unsigned char> user(static_cast<size_t>(sp.hi - sp.lo + 2 * pad));
  test::fill_pattern(user, static_cast<uint64_t>(l.total));
  // Vector data is 16-aligned: put the user pointer at residue umis mod 16.
  const int64_t uoff = pad - sp.lo + ((umis - (pad - sp.lo)) % 16 + 16) % 16;
  unsigned char* u = user.data() + uoff;
  const size_t n = static_cast<size_t>(l.total);
  std::vector<unsigned char> want(n + 32, 0xEE), got(n + 32, 0xEE);
  unsigned char* pk = got.data() + pmis;
  host_pack(l, u, want.data() + pmis);
  const Launch lp = plan(p, u, pk, true);
  out.kind = lp.kind;
  out.word = lp.word;
  emulate(lp);
  std::string d = test::first_difference(got.data(), want.data(), got.size());
  if (!d.empty()) {
    out.error = "pack (" + describe(lp) + "): " + d;
    return out;
  }
  std::vector<unsigned char> uwant(user.size(), 0x5A), ugot(user.size(), 0x5A);
  host_unpack(l, want.data() + pmis, uwant.data() + uoff);
  const Launch lu = plan(p, ugot.data() + uoff, want.data() + pmis, false);
  emulate(lu);
  d = test::first_difference(ugot.data(), uwant.data(), ugot.size());
  if (!d.empty()) out.error = "unpack (" + describe(lu) + "): " + d;
  return out;
}

Policy force_segments() {
  Policy p;
  p.row_bytes = 1;
  p.row16_bytes = 1;
  p.table_block_bytes = 0;
  p.misaligned_row_bytes = 1;
  return p;
}

Policy tiny_segments() {
  Policy p = force_segments();
  p.max_seg_bytes = 32;
  p.min_seg_bytes = 16;
  return p;
}

// ---- fast division and dims ------------------------------------------------

TEST(GpuIndexMath, FastDivSmallDivisorsExhaustiveNumerators) {
  for (uint32_t d = 1; d <= 300; ++d) {
    const FastDiv f = make_fast_div(d);
    for (uint32_t n = 0; n < 70000; ++n) ASSERT_EQ(fast_div(f, n), n / d) << n << " / " << d;
    for (uint32_t n = 0xFFFFFFFFu - 5000; n != 0; ++n) ASSERT_EQ(fast_div(f, n), n / d) << d;
  }
}

TEST(GpuIndexMath, FastDivRandom) {
  std::mt19937_64 rng(7);
  const uint32_t edge[] = {1u,          2u,          3u,         7u,          641u,
                           65535u,      65536u,      65537u,     0x7FFFFFFFu, 0x80000000u,
                           0x80000001u, 0xFFFFFFFEu, 0xFFFFFFFFu};
  for (uint32_t d : edge) {
    const FastDiv f = make_fast_div(d);
    for (uint32_t n : edge) ASSERT_EQ(fast_div(f, n), n / d) << n << " / " << d;
    for (int i = 0; i < 20000; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng());
      ASSERT_EQ(fast_div(f, n), n / d) << n << " / " << d;
    }
  }
  for (int i = 0; i < 2000; ++i) {
    const uint32_t d = static_cast<uint32_t>(rng() >> (rng() % 32)) | 1u;
    const FastDiv f = make_fast_div(d);
    for (int j = 0; j < 200; ++j) {
      const uint32_t n = static_cast<uint32_t>(rng());
      ASSERT_EQ(fast_div(f, n), n / d) << n << " / " << d;
    }
  }
}

TEST(GpuIndexMath, DivmodAnyWidth) {
  std::mt19937_64 rng(11);
  const int64_t ds[] = {1, 3, 1000, int64_t{0xFFFFFFFF}, int64_t{1} << 32, (int64_t{1} << 40) + 3};
  for (int64_t d : ds) {
    const Divisor v = make_divisor(d);
    for (int i = 0; i < 5000; ++i) {
      const int64_t n = static_cast<int64_t>(rng() >> (1 + rng() % 40));
      int64_t r = -1;
      const int64_t q = divmod(v, n, &r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    }
  }
}

TEST(GpuIndexMath, FastDimsNoDims) {
  const FastDims f = make_fast_dims(nullptr, 0);
  EXPECT_EQ(fast_dims_offset(f, 0), 0);
  const Dim one[] = {{1000, -24}};
  const FastDims g = make_fast_dims(one, 1);
  EXPECT_EQ(g.ninner, 0);
  EXPECT_EQ(fast_dims_offset(g, 999), -24 * 999);
}

TEST(GpuIndexMath, FastDimsMatchDimsOffset) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 3000; ++trial) {
    const int nd = 1 + static_cast<int>(rng() % kMaxDims);
    Dim dims[kMaxDims];
    int64_t n = 1;
    for (int d = 0; d < nd; ++d) {
      // Mostly small counts; now and then one past 2^32 to reach the slow path.
      int64_t c = 1 + static_cast<int64_t>(rng() % 9);
      if (rng() % 8 == 0) c = (int64_t{1} << 32) + static_cast<int64_t>(rng() % 5);
      if (n > (int64_t{1} << 50) / c) c = 1;
      dims[d] = {c, static_cast<int64_t>(rng() % 20001) - 10000};
      n *= c;
    }
    const FastDims f = make_fast_dims(dims, nd);
    for (int i = 0; i < 50; ++i) {
      const int64_t idx = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      ASSERT_EQ(fast_dims_offset(f, idx), dims_offset(dims, nd, idx)) << "trial " << trial;
    }
    ASSERT_EQ(fast_dims_offset(f, n - 1), dims_offset(dims, nd, n - 1));
  }
}

// Word and piece offsets of messages past 2^32 words and 2^32 pieces agree
// with packed_to_offset (no buffers: offsets only).
TEST(GpuIndexMath, OffsetsPast32Bits) {
  Layout l;
  l.kind = LayoutKind::kStrided;
  l.block_len = 24;
  l.dims = {{int64_t{3} << 30, 64}, {5, 8}};  // 1.6e10 blocks
  l.total = l.dims[0].count * l.dims[1].count * l.block_len;
  l.base = 100;
  const Prepared p = prepare(l, DeviceShape{});
  const LayoutView v = l.view();
  std::mt19937_64 rng(5);
  for (int k = 0; k <= log2_width(p.layout_align); ++k) {
    const int w = 1 << k;
    for (int i = 0; i < 20000; ++i) {
      const int64_t g = static_cast<int64_t>(rng() % static_cast<uint64_t>(p.words[k].nwords));
      ASSERT_EQ(word_user_offset(p.words[k], g, w) + l.base, packed_to_offset(v, g * w)) << g;
    }
  }
  // Strided pieces (class 0, arithmetic) past 2^32 pieces.
  const Prepared ps = prepare(l, DeviceShape{}, force_segments());
  ASSERT_GT(ps.segs.geom.cls[0].nitems, int64_t{1} << 32);
  for (int i = 0; i < 20000; ++i) {
    const SegClass& c = ps.segs.geom.cls[0];
    const int64_t it = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.nitems));
    const SegRef r = seg_item(ps.segs.geom, c, it);
    ASSERT_EQ(r.user + l.base, packed_to_offset(v, r.packed)) << it;
  }
  Layout b = layout_of(test::hand_tree(), 1);
  b.dims = {{int64_t{1} << 33, 1000}};
  b.total = b.tile_bytes << 33;
  const Prepared pb = prepare(b, DeviceShape{}, force_segments());
  const LayoutView vb = b.view();
  for (int k = 0; k < kSegClasses; ++k) {
    const SegClass& c = pb.segs.geom.cls[k];
    if (c.nitems == 0) continue;
    for (int i = 0; i < 20000; ++i) {
      const int64_t it = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.nitems));
      int64_t user = 0, packed = 0;
      if (k == kTinyClass) {
        tiny_item(pb.segs.geom, it, &user, &packed);
      } else {
        const SegRef r = seg_item(pb.segs.geom, c, it);
        user = r.user;
        packed = r.packed;
      }
      ASSERT_EQ(user + b.base, packed_to_offset(vb, packed)) << it;
    }
  }
}

// ---- selection ---------------------------------------------------------------

TEST(GpuSelect, AlignOf) {
  EXPECT_EQ(align_of(0), 16);
  EXPECT_EQ(align_of(1), 1);
  EXPECT_EQ(align_of(12), 4);
  EXPECT_EQ(align_of(-24), 8);
  EXPECT_EQ(align_of(4096), 16);
  EXPECT_EQ(align_of(std::numeric_limits<int64_t>::min()), 16);
}

TEST(GpuSelect, Rules) {
  alignas(16) static char buf[64];
  struct Case {
    type::NodePtr t;
    int64_t count;
    int umis, pmis;
    KernelKind kind;
    int word;  // 0: don't care
  };
  const std::vector<Case> cases = {
      {strided_tree(8, {{1000, 16}}), 1, 0, 0, KernelKind::kWords, 8},
      {strided_tree(1, {{1000, 2}}), 1, 0, 0, KernelKind::kWords, 1},
      {strided_tree(12, {{1000, 32}}), 1, 0, 0, KernelKind::kWords, 4},
      {strided_tree(64, {{1000, 128}}), 1, 0, 0, KernelKind::kWords, 16},
      {strided_tree(64, {{1000, 128}}), 1, 4, 0, KernelKind::kWords, 4},
      {strided_tree(64, {{1000, 128}}), 1, 1, 0, KernelKind::kSegments, 0},
      {strided_tree(16, {{1000, 32}}), 1, 0, 3, KernelKind::kWords, 1},
      {strided_tree(4096, {{100, 8192}}), 1, 0, 0, KernelKind::kWords, 16},
      {strided_tree(4096, {{100, 8192}}), 1, 8, 0, KernelKind::kSegments, 0},
      {strided_tree(4096, {{100, 8192}}), 1, 5, 0, KernelKind::kSegments, 0},
      {strided_tree(256, {{100, 1024}}), 1, 4, 0, KernelKind::kSegments, 0},
      {strided_tree(256, {{100, 1024}}), 1, 0, 0, KernelKind::kWords, 16},
      {type::make_dense(4096), 1, 0, 0, KernelKind::kMemcpy, 0},
      {test::hand_tree(), 1000, 0, 0, KernelKind::kWords, 4},
      {test::hand_tree(), 1000, 1, 0, KernelKind::kWords, 1},
      {test::struct_tree(), 100, 0, 0, KernelKind::kSegments, 0},
      {test::particle_tree(), 1000, 0, 0, KernelKind::kWords, 8},
      {test::particle_tree(), -1000, 0, 0, KernelKind::kWords, 8},
      {test::particle_tree(), -1000, 2, 0, KernelKind::kWords, 2},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    // A negative count: that many particles at their 64-byte extent.
    const Layout l =
        c.count < 0 ? layout_of(c.t, -c.count, test::kParticleExtent) : layout_of(c.t, c.count);
    const Prepared p = prepare(l, DeviceShape{});
    const Launch L = plan(p, buf + c.umis, buf + 16 + c.pmis, true);
    EXPECT_EQ(L.kind, c.kind) << "case " << i << ": " << l.describe() << " -> " << describe(L);
    if (c.word) {
      EXPECT_EQ(L.word, c.word) << "case " << i << ": " << describe(L);
    }
    if (L.kind == KernelKind::kWords || L.kind == KernelKind::kSegments) {
      EXPECT_GE(L.grid, 1);
      EXPECT_LE(L.grid, 132 * 8);
    }
  }
  // Long blocks: a warp per piece, cut so that every resident warp has two.
  const Prepared big = prepare(layout_of(strided_tree(1 << 20, {{64, 1 << 21}})), DeviceShape{});
  EXPECT_EQ(big.segs.geom.cls[0].lanes, 32);
  EXPECT_GE(big.segs.geom.cls[0].nitems, 2 * 132 * 8 * 8);
  EXPECT_EQ(big.segs.geom.seg_bytes % 16, 0);
  EXPECT_EQ(big.segs.geom.cls[1].nitems, 0);
  EXPECT_EQ(big.segs.geom.cls[kTinyClass].nitems, 0);
  // Few long blocks: pieces of 512 B (16 lanes of 2 words), widened while
  // the message leaves most of a wave idle.
  const Prepared few = prepare(layout_of(strided_tree(1 << 20, {{4, 1 << 21}})), DeviceShape{});
  EXPECT_EQ(few.segs.geom.seg_bytes, 512);
  EXPECT_EQ(few.segs.geom.cls[0].nitems, 4 * 2048);
  EXPECT_EQ(few.segs.geom.cls[0].lanes, 32);
  // 4096 rows of 512 B: 16 lanes where they fill the GPU, wider where not.
  DeviceShape small_gpu;
  small_gpu.sm_count = 8;
  const Layout rows = layout_of(strided_tree(512, {{4096, 1024}}));
  EXPECT_EQ(prepare(rows, small_gpu).segs.geom.cls[0].lanes, 16);
  EXPECT_EQ(prepare(rows, DeviceShape{}).segs.geom.cls[0].lanes, 32);
}

TEST(GpuSelect, LanesFor) {
  EXPECT_EQ(lanes_for(1), 8);
  EXPECT_EQ(lanes_for(256), 8);   // 16 words: 2 a lane
  EXPECT_EQ(lanes_for(257), 16);  // 17 words
  EXPECT_EQ(lanes_for(512), 16);  // 32 words: 2 a lane
  EXPECT_EQ(lanes_for(513), 32);
  EXPECT_EQ(lanes_for(1000), 32);
  EXPECT_EQ(lanes_for(2048), 32);  // more than a warp's trip: the body loops
  EXPECT_EQ(lanes_for(1 << 20), 32);
}

// The irregular piece list in classes: long pieces (>= short_piece_bytes),
// short ones (8 lanes), tiny ones (byte by byte through the tiny table). The
// classes together hold every byte of the tile once, and each class's pieces
// keep the tile's order.
TEST(GpuSelect, PieceClasses) {
  // struct_tree: 4 @0, 8 @8, 2 @16, 16 @32, 1 @50, 1000 @64, 12 @1072.
  const Layout l = layout_of(test::struct_tree(), 20000);
  const Prepared p = prepare(l, DeviceShape{});
  const SegGeom& g = p.segs.geom;
  ASSERT_EQ(g.seg_bytes, 0);
  int64_t per_unit[kSegClasses], bytes = 0;
  for (int c = 0; c < kSegClasses; ++c) {
    per_unit[c] = g.cls[c].per_unit.d;
    if (g.cls[c].nitems == 0) per_unit[c] = 0;
    EXPECT_EQ(g.cls[c].nitems, per_unit[c] * p.nunits);
    const int64_t end =
        c + 1 < kSegClasses ? p.class_at[c + 1] : static_cast<int64_t>(p.seg_list.size());
    if (c != kTinyClass) {
      EXPECT_EQ(end - p.class_at[c], per_unit[c]);
    }
    for (int64_t k = p.class_at[c]; k < end; ++k) {
      const Seg& x = p.seg_list[static_cast<size_t>(k)];
      bytes += x.len;
      if (c == 0) {
        EXPECT_GE(x.len, p.policy.short_piece_bytes);
      } else if (c == 1) {
        EXPECT_TRUE(x.len > kTinyBytes && x.len < p.policy.short_piece_bytes);
      } else {
        EXPECT_LE(x.len, kTinyBytes);
      }
      if (k > p.class_at[c]) {
        EXPECT_GT(x.dst, p.seg_list[static_cast<size_t>(k - 1)].dst);
      }
    }
  }
  EXPECT_EQ(bytes, p.unit_len);
  EXPECT_EQ(per_unit[0], 1);      // the 1000 B field
  EXPECT_EQ(g.cls[0].lanes, 32);  // 63 words: 2 a lane
  // Tiny: 4, 10 (8 and 2 merged), 16, 1 and 12 B, one table entry a byte.
  EXPECT_EQ(per_unit[kTinyClass], 43);
  ASSERT_EQ(p.tiny.size(), 43u);
  EXPECT_EQ(p.tiny[0].src, 0);
  EXPECT_EQ(p.tiny[4].src, 8);
  EXPECT_EQ(p.tiny[4].dst, 4);
  EXPECT_EQ(p.tiny[42].src, 1083);
  EXPECT_EQ(p.tiny[42].dst, 1042);
  EXPECT_EQ(g.cls[kTinyClass].lanes, 1);
  const Launch L = plan(p, nullptr, nullptr, true);
  EXPECT_EQ(L.kind, KernelKind::kSegments);
  EXPECT_EQ(describe(L).rfind("segments lanes=32/1 (list)", 0), 0u) << describe(L);
}

// Grids: one word (or one group's piece) per thread while that fits a wave,
// then a full wave with a grid-stride loop.
TEST(GpuSelect, GridSizes) {
  alignas(16) static char buf[64];
  DeviceShape s;  // 132 SMs, 8 CTAs per SM
  const Prepared p64k = prepare(layout_of(strided_tree(8, {{8192, 16}})), s);
  Launch L = plan(p64k, buf, buf + 16, true);
  ASSERT_EQ(L.kind, KernelKind::kWords);
  EXPECT_EQ(L.grid, 8192 / kThreads);
  const Prepared p16m = prepare(layout_of(strided_tree(8, {{1 << 21, 16}})), s);
  L = plan(p16m, buf, buf + 16, true);
  EXPECT_EQ(L.grid, 132 * 8);
  const Prepared hand = prepare(layout_of(test::hand_tree(), 68, test::kHandExtent), s);
  L = plan(hand, buf, buf + 16, true);
  EXPECT_EQ(L.grid, 4);  // 1020 words
  // 4096 rows of 256 B, 16-byte aligned: words of 16 B, one per thread.
  const Prepared sub =
      prepare(layout_of(strided_tree(256, {{8, 1 << 20}, {16, 32768}, {32, 512}})), s);
  L = plan(sub, buf, buf, true);
  ASSERT_EQ(L.kind, KernelKind::kWords);
  EXPECT_EQ(L.word, 16);
  EXPECT_EQ(L.grid, 4096 * 16 / kThreads);
  // The same 8-byte aligned: groups of 16 lanes (one 16-byte word each).
  L = plan(sub, buf + 8, buf, true);
  ASSERT_EQ(L.kind, KernelKind::kSegments);
  EXPECT_EQ(L.segs.geom.cls[0].lanes, 16);
  EXPECT_EQ(L.grid, 4096 * 16 / kThreads);
}

TEST(GpuSelect, EmptyAndContiguous) {
  const Prepared e = prepare(Layout{}, DeviceShape{});
  static char c[128];
  EXPECT_EQ(plan(e, c, c, true).kind, KernelKind::kNone);
  const Layout l = layout_of(type::make_dense(100, 7));
  const Prepared p = prepare(l, DeviceShape{});
  const Launch L = plan(p, c, c, true);
  EXPECT_EQ(L.kind, KernelKind::kMemcpy);
  EXPECT_EQ(L.src, c + 7);
  EXPECT_EQ(L.bytes, 100);
}

// Once prepared, choosing a launch is pointer arithmetic and a struct copy.
TEST(GpuSelect, PlanCostsWellUnderAMicrosecond) {
  const Layout l = layout_of(test::hand_tree(), 100000);
  const Prepared p = prepare(l, DeviceShape{});
  alignas(16) static char buf[64];
  const int reps = 200000;
  int64_t sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) sink += plan(p, buf + (i & 7), buf + 16, (i & 1) != 0).grid;
  const auto t1 = std::chrono::steady_clock::now();
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / reps;
  std::printf("plan(): %.1f ns per call\n", ns);
  EXPECT_GT(sink, 0);
  EXPECT_LT(ns, 1000.0);
}

TEST(GpuPoolMath, SizeClasses) {
  EXPECT_EQ(Pool::class_size(1, 4096), 4096u);
  EXPECT_EQ(Pool::class_size(4096, 4096), 4096u);
  EXPECT_EQ(Pool::class_size(4097, 4096), 5120u);
  EXPECT_EQ(Pool::class_size(6000, 4096), 6144u);
  EXPECT_EQ(Pool::class_size(size_t{1} << 30, 4096), size_t{1} << 30);
  EXPECT_EQ(Pool::class_size((size_t{1} << 30) + 1, 4096), (size_t{1} << 30) + (size_t{1} << 28));
  for (size_t n = 1; n < 100000; n += 37) {
    const size_t c = Pool::class_size(n, 4096);
    EXPECT_GE(c, n);
    EXPECT_LE(c, std::max<size_t>(4096, n + n / 4 + 1));
    EXPECT_EQ(Pool::class_size(c, 4096), c);  // classes are fixed points
  }
}

// ---- agents on the host vs the host engine ------------------------------------

// group_copy for lengths 0..700, both residues mod 16 and group widths:
// the right bytes land, nothing outside [d, d + n) is written and nothing
// outside [s, s + n) is read.
TEST(GpuAgent, GroupCopyAllShapes) {
  alignas(16) unsigned char src[1024], dst[1024], want[1024];
  for (size_t i = 0; i < sizeof src; ++i) src[i] = static_cast<unsigned char>(i * 13 + 7);
  LoadFence fence;
  for (int lanes : {1, 2, 4, 8, 16, 32})
    for (int64_t n = 0; n <= 700; n += (n < 70 ? 1 : 13))
      for (int so = 0; so < 16; ++so)
        for (int dof = 0; dof < 16; ++dof) {
          std::memset(dst, 0xA5, sizeof dst);
          std::memset(want, 0xA5, sizeof want);
          std::memcpy(want + 64 + dof, src + 64 + so, static_cast<size_t>(n));
          const char* s = reinterpret_cast<const char*>(src + 64 + so);
          fence = {s, s + n, 0};
          load_fence = &fence;
          for (int lane = 0; lane < lanes; ++lane)
            group_copy(reinterpret_cast<char*>(dst + 64 + dof), s, n, lane, lanes);
          load_fence = nullptr;
          ASSERT_EQ(test::first_difference(dst, want, sizeof dst), "")
              << "n " << n << " src+" << so << " dst+" << dof << " lanes " << lanes;
          ASSERT_EQ(fence.bad, 0) << "read outside the run: n " << n << " src+" << so << " dst+"
                                  << dof << " lanes " << lanes;
        }
}

// How a run splits: 16-byte aligned body words whose source words lie in the
// run, edges that cover the rest, nothing twice.
TEST(GpuAgent, SplitRun) {
  alignas(16) static char buf[256];
  for (int n = 0; n <= 100; ++n)
    for (int so = 0; so < 16; ++so)
      for (int dof = 0; dof < 16; ++dof) {
        const char* s = buf + 32 + so;
        char* d = buf + 128 + dof;
        const RunSplit x = split_run(d, s, n);
        SCOPED_TRACE("n " + std::to_string(n) + " s+" + std::to_string(so) + " d+" +
                     std::to_string(dof));
        ASSERT_LE(0, x.first);
        ASSERT_LE(x.first, x.last);
        ASSERT_LE(x.lo, x.hi);
        ASSERT_LE(x.hi, n);
        ASSERT_EQ(x.lo, x.head + 16 * x.first);
        ASSERT_EQ(x.hi, x.head + 16 * x.last);
        ASSERT_LT(n - x.hi, 32);
        ASSERT_LT(x.lo, 32);
        ASSERT_EQ(x.r, reinterpret_cast<uintptr_t>(s + x.head) % 16);
        if (x.last > x.first) {
          ASSERT_EQ(reinterpret_cast<uintptr_t>(d + x.lo) % 16, 0u);
          // What the body reads: its own bytes (r = 0 or 8), or from the
          // aligned 16-byte source word below the first body word to the end
          // of the one above the last.
          const int below = x.r % 8 ? static_cast<int>(x.r) : 0;
          const int above = x.r % 8 ? 16 - static_cast<int>(x.r) : 0;
          ASSERT_GE(s + x.lo - below, s);
          ASSERT_LE(s + x.hi + above, s + n);
          if (x.r % 8 == 0) {
            ASSERT_EQ(x.lo, x.head);  // no body word is left to the edges
            ASSERT_EQ(x.hi, x.head + 16 * ((n - x.head) / 16));
          }
        }
      }
}

// shift16 against memcpy for every source offset.
TEST(GpuAgent, Shift16) {
  unsigned char buf[32];
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i * 29 + 3);
  uint4 a, b, want;
  std::memcpy(&a, buf, 16);
  std::memcpy(&b, buf + 16, 16);
  for (uint32_t r = 1; r < 16; ++r) {
    std::memcpy(&want, buf + r, 16);
    const uint4 got = shift16(a, b, r);
    EXPECT_EQ(std::memcmp(&got, &want, 16), 0) << r;
  }
}

// Tiny pieces whose tile offsets pass 32 bits go with the short pieces.
TEST(GpuSelect, TinyPiecesPast32Bits) {
  const type::NodePtr t = type::make_list(
      {type::make_dense(8, 0), type::make_dense(400, 64), type::make_dense(4, int64_t{1} << 33)});
  const Layout l = layout_of(t, 3);
  const Prepared p = prepare(l, DeviceShape{});
  EXPECT_EQ(p.segs.geom.cls[kTinyClass].nitems, 0);
  EXPECT_EQ(p.segs.geom.cls[1].nitems, 2 * 3);
  EXPECT_TRUE(p.tiny.empty());
  const Prepared q = prepare(layout_of(test::struct_tree(), 3), DeviceShape{});
  EXPECT_EQ(q.segs.geom.cls[1].nitems, 0);
  EXPECT_EQ(q.segs.geom.cls[kTinyClass].nitems, 43 * 3);
}

TEST(GpuEmulation, SegmentGroupWidths) {
  const std::vector<Layout> ls = {layout_of(strided_tree(300, {{7, 700}})),
                                  layout_of(strided_tree(4096, {{3, 8192}, {2, 30000}})),
                                  layout_of(test::struct_tree(), 4)};
  for (const Layout& l : ls)
    for (int lanes : {1, 2, 4, 8, 16, 32})
      for (int m : {0, 1, 2, 4, 8}) {
        SCOPED_TRACE(l.describe() + " lanes " + std::to_string(lanes) + " misalign " +
                     std::to_string(m));
        ASSERT_EQ(check(l, m, (3 * m) % 16, force_segments(), lanes).error, "");
        Policy cut = force_segments();
        cut.max_seg_bytes = 1024;
        cut.min_seg_bytes = 1024;
        ASSERT_EQ(check(l, m, 0, cut, lanes).error, "");
      }
}

const int64_t kBlockLens[] = {1, 2, 3, 4, 7, 8, 12, 16, 24, 32, 64, 100, 300, 4096};

std::vector<std::pair<int64_t, int64_t>> dims_for(int nd, int64_t block, bool stride16) {
  // Innermost stride: the block plus a gap that keeps it (or not) a multiple of 16.
  int64_t s = block + (stride16 ? 16 + (16 - block % 16) % 16 : (block % 2 ? 2 : 5));
  const int64_t counts[] = {3, 2, 3, 2, 5};
  std::vector<std::pair<int64_t, int64_t>> dims(static_cast<size_t>(nd));
  for (int d = nd - 1; d >= 0; --d) {
    const int64_t c = d == nd - 1 ? (block >= 1024 ? 3 : 9) : counts[d];
    dims[static_cast<size_t>(d)] = {c, s};
    s = s * c + (stride16 ? 32 : 3);
  }
  return dims;
}

TEST(GpuEmulation, StridedSweep) {
  for (int nd = 1; nd <= 5; ++nd)
    for (int64_t block : kBlockLens)
      for (bool s16 : {true, false}) {
        const Layout l = layout_of(strided_tree(block, dims_for(nd, block, s16)));
        for (int m : {0, 1, 3, 4, 8}) {
          SCOPED_TRACE(l.describe() + " misalign " + std::to_string(m));
          Outcome o = check(l, m, 0);
          ASSERT_EQ(o.error, "");
          o = check(l, 0, m);
          ASSERT_EQ(o.error, "");
          o = check(l, m, 0, force_segments());
          ASSERT_EQ(o.error, "");
          o = check(l, m, (m * 7) % 16, tiny_segments());
          ASSERT_EQ(o.error, "");
        }
      }
}

TEST(GpuEmulation, EveryMisalignment) {
  const std::vector<Layout> ls = {
      layout_of(strided_tree(1, {{50, 2}})),     layout_of(strided_tree(3, {{40, 7}})),
      layout_of(strided_tree(8, {{40, 16}})),    layout_of(strided_tree(64, {{20, 128}})),
      layout_of(strided_tree(100, {{20, 200}})), layout_of(strided_tree(4096, {{3, 8192}})),
      layout_of(test::hand_tree(), 7),           layout_of(test::struct_tree(), 3),
      layout_of(test::particle_tree(), 9),       layout_of(type::make_dense(1000, 3)),
  };
  for (const Layout& l : ls)
    for (int um = 0; um < 16; ++um)
      for (int pm = 0; pm < 16; ++pm) {
        SCOPED_TRACE(l.describe() + " user+" + std::to_string(um) + " packed+" +
                     std::to_string(pm));
        ASSERT_EQ(check(l, um, pm).error, "");
        ASSERT_EQ(check(l, um, pm, tiny_segments()).error, "");
      }
}

TEST(GpuEmulation, IrregularTiles) {
  for (int64_t count : {1, 2, 7, 100, 1000}) {
    SCOPED_TRACE("count " + std::to_string(count));
    ASSERT_EQ(check(layout_of(test::hand_tree(), count, test::kHandExtent), 0, 0).error, "");
    ASSERT_EQ(check(layout_of(test::struct_tree(), count), 0, 0).error, "");
    ASSERT_EQ(check(layout_of(test::particle_tree(), count, test::kParticleExtent), 0, 0).error,
              "");
    ASSERT_EQ(
        check(layout_of(test::hand_tree(), count, test::kHandExtent), 0, 0, force_segments()).error,
        "");
  }
  // A 2D array of HAND tiles (tiles placed by two dims).
  type::NodePtr t = type::make_strided(5, 10000, type::make_strided(7, 300, test::hand_tree()));
  ASSERT_EQ(check(layout_of(t), 0, 0).error, "");
  ASSERT_EQ(check(layout_of(t), 2, 6, tiny_segments()).error, "");
}

// Tiles with pieces in every class (long, short, tiny) and long blocks cut
// into several pieces, at every pointer misalignment.
TEST(GpuEmulation, MixedPieceClasses) {
  std::vector<type::NodePtr> items;
  const int64_t lens[] = {4, 40, 1000, 2, 300, 17, 4096, 16, 255, 3};
  int64_t at = 0;
  for (int64_t len : lens) {
    items.push_back(type::make_dense(len, at + 1));
    at += len + 1 + len % 7;
  }
  const type::NodePtr t = type::make_list(std::move(items));
  Policy cut;  // long blocks cut into 512 B pieces
  cut.max_seg_bytes = 512;
  cut.min_seg_bytes = 512;
  for (int64_t count : {1, 3}) {
    const Layout l = layout_of(t, count, at + 5);
    const Prepared p = prepare(l, DeviceShape{});
    for (const SegClass& c : p.segs.geom.cls) ASSERT_GT(c.nitems, 0);
    for (int um = 0; um < 16; ++um)
      for (int pm = 0; pm < 16; ++pm) {
        SCOPED_TRACE("count " + std::to_string(count) + " user+" + std::to_string(um) + " packed+" +
                     std::to_string(pm));
        Outcome o = check(l, um, pm);
        ASSERT_EQ(o.error, "");
        ASSERT_EQ(o.kind, KernelKind::kSegments);
        ASSERT_EQ(check(l, um, pm, cut).error, "");
      }
  }
}

TEST(GpuEmulation, RandomTrees) {
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const type::NodePtr t = test::random_tree(rng, 4);
    const int64_t count = 1 + static_cast<int64_t>(seed % 4);
    const Layout l = layout_of(t, count);
    ASSERT_EQ(check(l, static_cast<int>(seed % 16), static_cast<int>(seed / 16 % 16)).error, "")
        << l.describe();
    ASSERT_EQ(check(l, static_cast<int>(seed % 5), 0, tiny_segments()).error, "") << l.describe();
  }
}

// The runtime's allocation-free path: a plan prepared from repeat_view()
// moves the same bytes as one from the repeated Layout.
TEST(GpuEmulation, FromRepeatView) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const type::NodePtr t = test::random_tree(rng, 3);
    const Layout one = layout_of(t);
    const type::NodePtr form = type::canonicalize(t);
    const int64_t extent = (form->hi - form->lo) + static_cast<int64_t>(seed % 3) * 4;
    const int64_t count = 1 + static_cast<int64_t>(seed % 6);
    auto v = repeat_view(one, count, extent);
    if (!v) continue;  // more dims than a view holds
    const Layout l = layout_of(t, count, extent);
    ASSERT_EQ(check(l, static_cast<int>(seed % 16), 0, {}, 0, &v.value()).error, "");
    ASSERT_EQ(check(l, 0, 1, tiny_segments(), 0, &v.value()).error, "");
  }
}

}  // namespace
}  // namespace loom::pack::gpu

namespace loom::pack::gpu {
namespace {

// Transfers, layout to layout in one words kernel (a peer's buffer read in
// its own layout into the receive's): emulated word by word, against the
// host engine packing one and unpacking into the other. Random trees on the
// sending side, a strided receive of the same size with a random block and
// gap, random misalignment of both buffers; gap bytes must stay as they were.
void emulate_transfer(const Launch& l) {
  emulate_words_as(l.word, l.xfer);
}

TEST(GpuEmulation, TransferBetweenLayouts) {
  int planned = 0;
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed * 31);
    const type::NodePtr t = test::random_tree(rng, 4);
    const Layout from = layout_of(t, 1 + static_cast<int64_t>(seed % 3));
    if (from.total == 0) continue;
    int64_t block = 1;
    for (int64_t b : {16, 8, 4, 2})
      if (from.total % b == 0 && rng() % 3 != 0) {
        block = b;
        break;
      }
    // Never 0, so the receive is never contiguous; sometimes misaligning.
    const int64_t gap = static_cast<int64_t>(1 + rng() % 2) * block + (rng() % 4 == 0 ? 1 : 0);
    const Layout to = layout_of(strided_tree(block, {{from.total / block, block + gap}}));
    ASSERT_EQ(to.total, from.total);
    const Prepared pf = prepare(from, DeviceShape{}), pt = prepare(to, DeviceShape{});
    const test::Span sf = test::span_of(from), st = test::span_of(to);
    std::vector<unsigned char> src(static_cast<size_t>(sf.hi - sf.lo + 64));
    test::fill_pattern(src, seed);
    const int64_t smis = static_cast<int64_t>(rng() % 16), dmis = static_cast<int64_t>(rng() % 16);
    const unsigned char* s = src.data() + 16 + smis - sf.lo;
    std::vector<unsigned char> want(static_cast<size_t>(st.hi - st.lo + 64), 0x5A), got = want;
    const int64_t doff = 16 + dmis - st.lo;
    std::vector<unsigned char> packed(static_cast<size_t>(from.total));
    host_pack(from, s, packed.data());
    host_unpack(to, packed.data(), want.data() + doff);
    Launch l;
    if (!plan_transfer(pf, s, pt, got.data() + doff, &l)) {
      // Only a contiguous side or a tile without a word table has no transfer.
      EXPECT_TRUE(pf.kind == LayoutKind::kContiguous || pt.kind == LayoutKind::kContiguous ||
                  (pf.kind == LayoutKind::kBlocks && !pf.has_table))
          << from.describe() << " -> " << to.describe();
      continue;
    }
    ++planned;
    emulate_transfer(l);
    ASSERT_EQ(test::first_difference(got.data(), want.data(), got.size()), "")
        << describe(l) << ": " << from.describe() << " -> " << to.describe();
  }
  EXPECT_GT(planned, 200);  // the rest: a contiguous sending side
}

TEST(GpuSelect, TransferRefusesDifferentSizes) {
  const Prepared a = prepare(layout_of(strided_tree(8, {{10, 16}})), DeviceShape{});
  const Prepared b = prepare(layout_of(strided_tree(8, {{11, 16}})), DeviceShape{});
  alignas(16) char buf[512];
  Launch l;
  EXPECT_FALSE(plan_transfer(a, buf, b, buf + 256, &l));
  EXPECT_TRUE(plan_transfer(a, buf, a, buf + 256, &l));
  EXPECT_EQ(l.kind, KernelKind::kTransfer);
  EXPECT_EQ(l.word, 8);
  EXPECT_FALSE(plan_transfer(a, buf + 4, a, buf + 256, &l) && l.word != 4);
}

}  // namespace
}  // namespace loom::pack::gpu
