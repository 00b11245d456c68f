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

// Resident threads of the segments kernel: one full wave.
int64_t wave_threads(const DeviceShape& s) {
  return int64_t{s.sm_count} * s.segs_ctas_per_sm * kThreads;
}

// Pieces wanted in flight: two per resident warp, so the grid-stride loop
// still balances when pieces differ in length.
int64_t target_items(const DeviceShape& s) {
  return 2 * wave_threads(s) / 32;
}

void set_lanes(SegClass& c, int lanes) {
  c.lanes = lanes;
  c.lanes_log2 = log2_pow2(lanes);
}

// Threads the segments kernel could keep busy: a group per piece, and a
// thread per kTinyItems tiny bytes.
int64_t lanes_in_use(const SegGeom& g) {
  int64_t n = ceil_div(g.cls[kTinyClass].nitems, kTinyItems);
  for (int c = 0; c < kTinyClass; ++c) n += g.cls[c].nitems * g.cls[c].lanes;
  return n;
}

// A message too small to fill one wave: widen the groups of a class (while
// every lane still gets a body word), so more SMs share the work and each
// lane's share is shorter.
void widen(SegGeom& g, int c, int64_t piece_bytes, const DeviceShape& s) {
  SegClass& k = g.cls[c];
  const int64_t words = ceil_div(piece_bytes, 16);
  while (k.nitems > 0 && k.lanes < 32 && k.lanes < words &&
         lanes_in_use(g) + k.nitems * k.lanes <= wave_threads(s))
    set_lanes(k, 2 * k.lanes);
}

void prepare_strided_segments(Prepared& p, const FastDims& fd) {
  const Policy& pol = p.policy;
  const int64_t len = p.unit_len;
  const int64_t target = target_items(p.shape);
  int64_t seg = pol.max_seg_bytes;
  while (seg > pol.min_seg_bytes && p.nunits * ceil_div(len, seg) < target) seg /= 2;
  SegGeom& g = p.segs.geom;
  g.dims = fd;
  g.unit_bytes = len;
  g.seg_bytes = seg;
  g.unit_len = len;
  SegClass& c = g.cls[0];
  c.per_unit = make_divisor(ceil_div(len, seg));
  c.nitems = p.nunits * c.per_unit.d;
  set_lanes(c, lanes_for(std::min(len, seg)));
  widen(g, 0, std::min(len, seg), p.shape);
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
  // Tiny pieces go byte by byte through a table of 32-bit offsets; where the
  // tile's offsets do not fit, they go with the short pieces instead.
  constexpr int64_t lo32 = std::numeric_limits<int32_t>::min(),
                    hi32 = std::numeric_limits<int32_t>::max();
  bool tiny_fits = p.unit_len <= hi32;
  for (int64_t i = 0; i < l.nblocks && tiny_fits; ++i) {
    const Block& b = l.blocks[i];
    if (b.len <= kTinyBytes && (b.off < lo32 || b.off + b.len - 1 > hi32)) tiny_fits = false;
  }
  // Pieces by class: long, short, tiny (the order of seg_list).
  std::vector<Seg> by[kSegClasses];
  for (int64_t i = 0; i < l.nblocks; ++i) {
    const Block& b = l.blocks[i];
    for (int64_t x = 0; x < b.len; x += seg) {
      const Seg piece{b.off + x, l.prefix[i] + x, std::min(seg, b.len - x)};
      const int c = piece.len <= kTinyBytes             ? (tiny_fits ? kTinyClass : 1)
                    : piece.len < pol.short_piece_bytes ? 1
                                                        : 0;
      by[c].push_back(piece);
    }
  }
  p.tiny.clear();
  for (const Seg& x : by[kTinyClass])
    for (int64_t k = 0; k < x.len; ++k)
      p.tiny.push_back({static_cast<int32_t>(x.src + k), static_cast<int32_t>(x.dst + k)});
  p.seg_list.clear();
  p.seg_list.reserve(static_cast<size_t>(pieces(seg)));
  SegGeom& g = p.segs.geom;
  g.dims = fd;
  g.unit_bytes = p.unit_len;
  g.seg_bytes = 0;
  g.unit_len = 0;
  int64_t bytes[kSegClasses] = {};
  for (int c = 0; c < kSegClasses; ++c) {
    p.class_at[c] = static_cast<int64_t>(p.seg_list.size());
    for (const Seg& x : by[c]) bytes[c] += x.len;
    p.seg_list.insert(p.seg_list.end(), by[c].begin(), by[c].end());
    // Items: pieces, or bytes for the tiny class.
    const int64_t n = c == kTinyClass ? bytes[c] : static_cast<int64_t>(by[c].size());
    g.cls[c].per_unit = make_divisor(n);
    g.cls[c].nitems = p.nunits * n;
  }
  const int64_t mean0 = bytes[0] / std::max<int64_t>(1, static_cast<int64_t>(by[0].size()));
  const int64_t mean1 = bytes[1] / std::max<int64_t>(1, static_cast<int64_t>(by[1].size()));
  set_lanes(g.cls[0], lanes_for(mean0));
  set_lanes(g.cls[1], 8);
  set_lanes(g.cls[kTinyClass], 1);
  widen(g, 0, mean0, p.shape);
  widen(g, 1, mean1, p.shape);
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
    case KernelKind::kTransfer:
      return "transfer";
  }
  return "?";
}

int align_of(int64_t x) {
  uint64_t u = static_cast<uint64_t>(x);
  if (u == 0) return 16;
  uint64_t low = u & (~u + 1);
  return low >= 16 ? 16 : static_cast<int>(low);
}

int lanes_for(int64_t len) {
  const int64_t words = ceil_div(len, 16);
  int lanes = 8;
  while (lanes < 32 && int64_t{lanes} * kShiftItems < words) lanes *= 2;
  return lanes;
}

void Prepared::bind(const Seg* segs_at, const int32_t* table_at, const TinyByte* tiny_at) {
  for (int c = 0; c < kSegClasses; ++c)
    segs.geom.cls[c].segs =
        kind == LayoutKind::kBlocks && segs_at ? segs_at + class_at[c] : nullptr;
  segs.geom.tiny = kind == LayoutKind::kBlocks ? tiny_at : nullptr;
  for (auto& w : words) w.table = kind == LayoutKind::kBlocks && has_table ? table_at : nullptr;
}

Prepared prepare(const LayoutView& l, const DeviceShape& shape, const Policy& policy) {
  Prepared p;
  p.policy = policy;
  // group_copy takes runs shorter than 2^31 bytes; pieces stay multiples of 16.
  p.policy.max_seg_bytes =
      std::clamp<int64_t>(policy.max_seg_bytes, 16, int64_t{1} << 30) & ~int64_t{15};
  p.policy.min_seg_bytes = std::clamp<int64_t>(policy.min_seg_bytes, 16, p.policy.max_seg_bytes);
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
  p.bind(p.seg_list.data(), p.table.data(), p.tiny.data());
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
    // 16-byte words: the words kernel at any row length (four 16-byte loads
    // in flight per thread beat a group's share of a row, measured from
    // 256 B to 4 KiB rows on the H200). Narrower words: long rows by groups,
    // which move 16-byte words whatever the pointers' alignment.
    words = w == 16 ? p.unit_len < pol.row16_bytes
                    : !(p.unit_len >= pol.row_bytes ||
                        (w < 4 && p.unit_len >= pol.misaligned_row_bytes));
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
    // One word per thread until the grid is a full wave: a short message
    // spreads over many SMs and each thread's path is one word long (a
    // thread's further words cost a serial pass through the index code).
    const int64_t cap = int64_t{p.shape.sm_count} * p.shape.words_ctas_per_sm[k] * pol.waves;
    L.grid =
        std::clamp<int64_t>(ceil_div(L.words.geom.nwords, kThreads), 1, std::max<int64_t>(1, cap));
  } else {
    L.kind = KernelKind::kSegments;
    L.segs = p.segs;
    L.segs.user = u;
    L.segs.packed = pk;
    L.segs.pack = pack ? 1 : 0;
    const int64_t cap = int64_t{p.shape.sm_count} * p.shape.segs_ctas_per_sm * pol.waves;
    L.grid = std::clamp<int64_t>(ceil_div(lanes_in_use(L.segs.geom), kThreads), 1,
                                 std::max<int64_t>(1, cap));
  }
  return L;
}

bool plan_transfer(const Prepared& from, const void* src, const Prepared& to, void* dst,
                   Launch* out) {
  *out = Launch{};
  auto words_side = [](const Prepared& p) {
    return p.kind == LayoutKind::kStrided || (p.kind == LayoutKind::kBlocks && p.has_table);
  };
  if (from.total != to.total || !words_side(from) || !words_side(to)) return false;
  const int w = std::min(word_width(from, src, nullptr), word_width(to, dst, nullptr));
  const int k = log2_width(w);
  if (!from.words_ok[k] || !to.words_ok[k]) return false;
  out->kind = KernelKind::kTransfer;
  out->word = w;
  out->xfer.src = static_cast<const char*>(src) + from.base;
  out->xfer.dst = static_cast<char*>(dst) + to.base;
  out->xfer.from = from.words[k];
  out->xfer.to = to.words[k];
  const int64_t cap =
      int64_t{from.shape.sm_count} * from.shape.words_ctas_per_sm[k] * from.policy.waves;
  out->grid =
      std::clamp<int64_t>(ceil_div(out->xfer.from.nwords, kThreads), 1, std::max<int64_t>(1, cap));
  return true;
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
    case KernelKind::kSegments: {
      // "segments lanes=16/1 (list)": the group width of each class in use.
      char lanes[40] = "";
      int at = 0;
      int64_t n = 0;
      for (const SegClass& c : l.segs.geom.cls) {
        if (c.nitems == 0) continue;
        at += std::snprintf(lanes + at, sizeof lanes - static_cast<size_t>(at), "%s%d",
                            n ? "/" : "", c.lanes);
        n += c.nitems;
      }
      std::snprintf(buf, sizeof buf, "segments lanes=%s%s, %lld pieces, grid %lld x %d", lanes,
                    l.segs.geom.seg_bytes == 0 ? " (list)" : "", static_cast<long long>(n),
                    static_cast<long long>(l.grid), l.threads);
      return buf;
    }
    case KernelKind::kTransfer:
      std::snprintf(buf, sizeof buf, "transfer W=%d, %lld words, grid %lld x %d", l.word,
                    static_cast<long long>(l.xfer.from.nwords), static_cast<long long>(l.grid),
                    l.threads);
      return buf;
  }
  return "?";
}

}  // namespace loom::pack::gpu
