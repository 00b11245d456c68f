#include "pack/cuda/policy.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace loom::pack::gpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int log2_pow2(int64_t x) {
  int k = 0;
  while ((int64_t{1} << k) < x) ++k;
  return k;
}

// Lanes that share one piece: at least four 16-byte words per lane, so the
// unrolled copy loop keeps four loads in flight (one per lane would leave the
// SMs short of outstanding bytes); up to a warp.
int lanes_for(int64_t piece) {
  int lanes = 1;
  while (lanes < 32 && int64_t{lanes} * 2 * 64 <= piece) lanes *= 2;
  return lanes;
}

// Pieces wanted in flight: two per resident warp, so the grid-stride loop
// still balances when pieces differ in length.
int64_t target_items(const DeviceShape& s) {
  return 2 * int64_t{s.sm_count} * s.segs_ctas_per_sm * (kThreads / 32);
}

void prepare_strided_segments(Prepared& p, const FastDims& fd) {
  const Policy& pol = p.policy;
  const int64_t len = p.unit_len;
  const int64_t target = target_items(p.shape);
  int64_t seg = pol.max_seg_bytes;
  while (seg > pol.min_seg_bytes && p.nunits * ceil_div(len, seg) < target) seg /= 2;
  SegGeom& g = p.segs.geom;
  g.per_unit = make_divisor(ceil_div(len, seg));
  g.nitems = p.nunits * g.per_unit.d;
  g.dims = fd;
  g.unit_bytes = len;
  g.seg_bytes = seg;
  g.unit_len = len;
  p.segs.lanes = lanes_for(std::min(len, seg));
  p.segs.lanes_log2 = log2_pow2(p.segs.lanes);
}

void prepare_block_segments(Prepared& p, const LayoutView& l, const FastDims& fd) {
  const Policy& pol = p.policy;
  const int64_t target = target_items(p.shape);
  auto pieces = [&](int64_t seg) {
    int64_t n = 0;
    for (int64_t i = 0; i < l.nblocks; ++i) n += ceil_div(l.blocks[i].len, seg);
    return n;
  };
  int64_t seg = pol.max_seg_bytes;
  while (seg > pol.min_seg_bytes && p.nunits * pieces(seg) < target) seg /= 2;
  p.seg_list.clear();
  p.seg_list.reserve(static_cast<size_t>(pieces(seg)));
  for (int64_t i = 0; i < l.nblocks; ++i) {
    const Block& b = l.blocks[i];
    for (int64_t x = 0; x < b.len; x += seg)
      p.seg_list.push_back({b.off + x, l.prefix[i] + x, std::min(seg, b.len - x)});
  }
  const int64_t nsegs = static_cast<int64_t>(p.seg_list.size());
  SegGeom& g = p.segs.geom;
  g.per_unit = make_divisor(nsegs);
  g.nitems = p.nunits * nsegs;
  g.dims = fd;
  g.unit_bytes = p.unit_len;
  g.seg_bytes = 0;
  g.unit_len = 0;
  p.segs.lanes = lanes_for(p.unit_len / std::max<int64_t>(1, nsegs));
  p.segs.lanes_log2 = log2_pow2(p.segs.lanes);
}

// The word table of one tile: entry j is the user offset of packed bytes
// [j*A, (j+1)*A) of the tile, A = layout_align (every block length and
// offset is a multiple of A). Only for short blocks in a tile small enough,
// with offsets that fit 32 bits.
void prepare_table(Prepared& p, const LayoutView& l) {
  const Policy& pol = p.policy;
  const int64_t a = p.layout_align;
  const int64_t mean_block = p.unit_len / std::max<int64_t>(1, p.nblocks);
  if (mean_block >= pol.table_block_bytes) return;
  // plan() never picks the table when words would be narrower than 4 B and
  // blocks are not short; with layout_align < 4 that is every call.
  if (a < 4 && mean_block >= pol.misaligned_row_bytes) return;
  if (p.unit_len / a > pol.max_table_words) return;
  constexpr int64_t lo = std::numeric_limits<int32_t>::min(),
                    hi = std::numeric_limits<int32_t>::max();
  for (int64_t i = 0; i < l.nblocks; ++i) {
    const Block& b = l.blocks[i];
    if (b.off < lo || b.off > hi || b.off + b.len - 1 > hi) return;
  }
  p.table.clear();
  p.table.reserve(static_cast<size_t>(p.unit_len / a));
  for (int64_t i = 0; i < l.nblocks; ++i)
    for (int64_t x = 0; x < l.blocks[i].len; x += a)
      p.table.push_back(static_cast<int32_t>(l.blocks[i].off + x));
  p.has_table = true;
}

}  // namespace

const char* kernel_name(KernelKind k) {
  switch (k) {
    case KernelKind::kNone:
      return "none";
    case KernelKind::kMemcpy:
      return "memcpy";
    case KernelKind::kWords:
      return "words";
    case KernelKind::kSegments:
      return "segments";
  }
  return "?";
}

int align_of(int64_t x) {
  uint64_t u = static_cast<uint64_t>(x);
  if (u == 0) return 16;
  uint64_t low = u & (~u + 1);
  return low >= 16 ? 16 : static_cast<int>(low);
}

void Prepared::bind(const Seg* segs_at, const int32_t* table_at) {
  segs.geom.segs = kind == LayoutKind::kBlocks ? segs_at : nullptr;
  for (auto& w : words) w.table = kind == LayoutKind::kBlocks && has_table ? table_at : nullptr;
}

Prepared prepare(const LayoutView& l, const DeviceShape& shape, const Policy& policy) {
  Prepared p;
  p.policy = policy;
  p.shape = shape;
  p.total = l.total;
  p.base = l.base;
  p.kind = l.total > 0 ? l.kind : LayoutKind::kEmpty;
  if (p.kind == LayoutKind::kEmpty) return p;
  if (p.kind == LayoutKind::kContiguous) {
    p.unit_len = l.total;
    p.nunits = 1;
    p.nblocks = 1;
    p.layout_align = 16;
    return p;
  }
  const FastDims fd = make_fast_dims(l.dims, l.ndims);
  int align = 16;
  for (int d = 0; d < l.ndims; ++d)
    if (l.dims[d].count > 1) align = std::min(align, align_of(l.dims[d].stride));
  if (p.kind == LayoutKind::kStrided) {
    p.unit_len = l.block_len;
    p.nblocks = 1;
    align = std::min(align, align_of(l.block_len));
  } else {
    p.unit_len = l.tile_bytes;
    p.nblocks = l.nblocks;
    for (int64_t i = 0; i < l.nblocks; ++i)
      align = std::min({align, align_of(l.blocks[i].off), align_of(l.blocks[i].len)});
  }
  p.nunits = l.total / p.unit_len;
  p.layout_align = align;

  const int top = log2_width(align);
  for (int k = 0; k <= top; ++k) {
    const int64_t w = int64_t{1} << k;
    WordGeom& g = p.words[k];
    g.nwords = l.total / w;
    g.wpu = make_divisor(p.unit_len / w);
    g.dims = fd;
    g.table_shift = top - k;
    p.words_ok[k] = true;
  }
  if (p.kind == LayoutKind::kStrided) {
    prepare_strided_segments(p, fd);
  } else {
    prepare_block_segments(p, l, fd);
    prepare_table(p, l);
  }
  p.bind(p.seg_list.data(), p.table.data());
  return p;
}

int word_width(const Prepared& p, const void* user, const void* packed) {
  const uintptr_t bits = (reinterpret_cast<uintptr_t>(user) + static_cast<uintptr_t>(p.base)) |
                         reinterpret_cast<uintptr_t>(packed);
  int w = p.layout_align;
  while (w > 1 && (bits & static_cast<uintptr_t>(w - 1)) != 0) w >>= 1;
  return w;
}

Launch plan(const Prepared& p, const void* user, const void* packed, bool pack) {
  Launch L;
  if (p.kind == LayoutKind::kEmpty) return L;
  char* u = const_cast<char*>(static_cast<const char*>(user)) + p.base;
  char* pk = const_cast<char*>(static_cast<const char*>(packed));
  if (p.kind == LayoutKind::kContiguous) {
    L.kind = KernelKind::kMemcpy;
    L.dst = pack ? static_cast<void*>(pk) : static_cast<void*>(u);
    L.src = pack ? static_cast<const void*>(u) : static_cast<const void*>(pk);
    L.bytes = p.total;
    return L;
  }
  const Policy& pol = p.policy;
  const int w = word_width(p, user, packed);
  bool words;
  if (p.kind == LayoutKind::kStrided) {
    words = !(p.unit_len >= pol.row_bytes || (w < 4 && p.unit_len >= pol.misaligned_row_bytes));
  } else {
    const int64_t mean_block = p.unit_len / std::max<int64_t>(1, p.nblocks);
    words = p.has_table && !(w < 4 && mean_block >= pol.misaligned_row_bytes);
  }
  if (words) {
    const int k = log2_width(w);
    L.kind = KernelKind::kWords;
    L.word = w;
    L.words.user = u;
    L.words.packed = pk;
    L.words.pack = pack ? 1 : 0;
    L.words.geom = p.words[k];
    const int64_t per_cta = int64_t{words_items(w)} * kThreads;
    const int64_t cap = int64_t{p.shape.sm_count} * p.shape.words_ctas_per_sm[k] * pol.waves;
    L.grid =
        std::clamp<int64_t>(ceil_div(L.words.geom.nwords, per_cta), 1, std::max<int64_t>(1, cap));
  } else {
    L.kind = KernelKind::kSegments;
    L.segs = p.segs;
    L.segs.user = u;
    L.segs.packed = pk;
    L.segs.pack = pack ? 1 : 0;
    const int64_t groups_per_cta = kThreads / L.segs.lanes;
    const int64_t cap = int64_t{p.shape.sm_count} * p.shape.segs_ctas_per_sm * pol.waves;
    L.grid = std::clamp<int64_t>(ceil_div(L.segs.geom.nitems, groups_per_cta), 1,
                                 std::max<int64_t>(1, cap));
  }
  return L;
}

std::string describe(const Launch& l) {
  char buf[200];
  switch (l.kind) {
    case KernelKind::kNone:
      return "none (empty)";
    case KernelKind::kMemcpy:
      std::snprintf(buf, sizeof buf, "memcpy %lld B", static_cast<long long>(l.bytes));
      return buf;
    case KernelKind::kWords:
      std::snprintf(buf, sizeof buf, "words W=%d%s, %lld words, grid %lld x %d", l.word,
                    l.words.geom.table ? " (table)" : "",
                    static_cast<long long>(l.words.geom.nwords), static_cast<long long>(l.grid),
                    l.threads);
      return buf;
    case KernelKind::kSegments:
      std::snprintf(buf, sizeof buf, "segments lanes=%d%s, %lld pieces, grid %lld x %d",
                    l.segs.lanes, l.segs.geom.segs ? " (list)" : "",
                    static_cast<long long>(l.segs.geom.nitems), static_cast<long long>(l.grid),
                    l.threads);
      return buf;
  }
  return "?";
}

}  // namespace loom::pack::gpu
