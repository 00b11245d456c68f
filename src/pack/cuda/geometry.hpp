// Where each piece of work lives: the index math of the two GPU kernel
// families, as plain host/device functions so the CPU tests run exactly what
// the kernels run. Offsets on the user side are relative to user + base.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pack/cuda/fast_div.hpp"

#if defined(__CUDA_ARCH__)
#define LOOM_LDG(p) __ldg(p)
#else
#define LOOM_LDG(p) (*(p))
#endif

namespace loom::pack::gpu {

// Words kernel: the message is `nwords` words of W bytes in packed order.
// Word g is word r = g % wpu of unit u = g / wpu, where a unit is a strided
// block (kStrided) or a tile (kBlocks) placed by `dims`. Inside a unit the
// r-th word sits at r * W (a block) or, for a tile, at the offset that
// `table` gives for its table word (table words are W << table_shift bytes:
// the layout's own alignment, which a misaligned pointer may split further).
struct WordGeom {
  int64_t nwords = 0;
  Divisor wpu;
  FastDims dims;
  const int32_t* table = nullptr;
  int table_shift = 0;
};

LOOM_HD int64_t word_user_offset(const WordGeom& g, int64_t w, int W) {
  int64_t r = 0, u = w;
  if (g.wpu.d != 1) u = divmod(g.wpu, w, &r);
  int64_t in;
  if (g.table) {
    const int64_t mask = (int64_t{1} << g.table_shift) - 1;
    in = int64_t{LOOM_LDG(g.table + (r >> g.table_shift))} + (r & mask) * W;
  } else {
    in = r * W;
  }
  return fast_dims_offset(g.dims, u) + in;
}

// One contiguous run of a tile: `len` bytes at user offset `src` and packed
// offset `dst`, both relative to the tile. Long blocks are cut into several.
struct Seg {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t len = 0;
};

// Segments kernel. The pieces of a unit fall into classes by length: long
// runs (class 0) copied by groups of up to a warp, short ones (class 1) by
// 8 lanes, and tiny ones (at most kTinyBytes) byte by byte, one lane per
// byte, so that a warp's accesses to the tiny fields of a few tiles are
// coalesced instead of each lane walking its own field. Class c has `nitems`
// items (pieces; bytes for the tiny class), `per_unit` of them per unit; unit
// u sits at user offset fast_dims_offset(dims, u) and packed offset
// u * unit_bytes. With `segs` null (a strided layout, class 0 only) the unit
// is one block of `unit_len` bytes cut into pieces of `seg_bytes`.
inline constexpr int kSegClasses = 3;  // 0: long, 1: short, 2: tiny
inline constexpr int kTinyClass = 2;
inline constexpr int64_t kTinyBytes = 16;  // pieces this short go byte by byte

struct SegClass {
  int64_t nitems = 0;
  Divisor per_unit;
  const Seg* segs = nullptr;  // this class's pieces of one tile (kBlocks)
  int lanes = 32;             // a power of two <= 32 (1 for the tiny class)
  int lanes_log2 = 5;
};

// One byte of a tile's tiny pieces: its user and packed offsets in the tile.
struct TinyByte {
  int32_t src = 0;
  int32_t dst = 0;
};

struct SegGeom {
  FastDims dims;
  int64_t unit_bytes = 0;
  int64_t seg_bytes = 0;
  int64_t unit_len = 0;
  SegClass cls[kSegClasses];
  const TinyByte* tiny = nullptr;  // the tiny class's bytes of one tile
};

struct SegRef {
  int64_t user = 0;
  int64_t packed = 0;
  int64_t len = 0;
};

// Piece i of class c (a group class).
LOOM_HD SegRef seg_item(const SegGeom& g, const SegClass& c, int64_t i) {
  int64_t k = 0, u = i;
  if (c.per_unit.d != 1) u = divmod(c.per_unit, i, &k);
  SegRef s;
  s.user = fast_dims_offset(g.dims, u);
  s.packed = u * g.unit_bytes;
  if (c.segs) {
    const Seg* p = c.segs + k;
    s.user += LOOM_LDG(&p->src);
    s.packed += LOOM_LDG(&p->dst);
    s.len = LOOM_LDG(&p->len);
  } else {
    const int64_t at = k * g.seg_bytes;
    s.user += at;
    s.packed += at;
    s.len = g.unit_len - at < g.seg_bytes ? g.unit_len - at : g.seg_bytes;
  }
  return s;
}

// Byte i of the tiny class: its user and packed offsets.
LOOM_HD void tiny_item(const SegGeom& g, int64_t i, int64_t* user, int64_t* packed) {
  const SegClass& c = g.cls[kTinyClass];
  int64_t k = 0, u = i;
  if (c.per_unit.d != 1) u = divmod(c.per_unit, i, &k);
  // One 8-byte load for the pair (little endian: src is the low half).
  static_assert(sizeof(TinyByte) == 8 && offsetof(TinyByte, dst) == 4);
  const uint64_t both =
      static_cast<uint64_t>(LOOM_LDG(reinterpret_cast<const unsigned long long*>(g.tiny + k)));
  *user = fast_dims_offset(g.dims, u) + static_cast<int32_t>(static_cast<uint32_t>(both));
  *packed = u * g.unit_bytes + static_cast<int32_t>(static_cast<uint32_t>(both >> 32));
}

}  // namespace loom::pack::gpu
