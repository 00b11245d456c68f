// Index math shared by the host engine and the CUDA kernels: plain functions
// compiled for both sides, so CPU tests cover what the GPU runs.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif

namespace loom::pack {

inline constexpr int kMaxDims = 8;

struct Dim {
  int64_t count;
  int64_t stride;  // bytes
};

struct Block {
  int64_t off;  // bytes, relative to the tile origin
  int64_t len;  // bytes
};

enum class LayoutKind : uint8_t { kEmpty, kContiguous, kStrided, kBlocks };

// What one (type, count) moves, flat enough for a kernel argument.
//  kContiguous: `total` bytes at `base`.
//  kStrided:    blocks of `block_len` bytes at base + sum(i_d * dims[d].stride).
//  kBlocks:     tiles at base + sum(i_d * dims[d].stride); each tile is the
//               `nblocks` blocks, whose packed offsets are prefix[0..nblocks].
// Dims are outermost first; the innermost index moves fastest in packed order.
struct LayoutView {
  LayoutKind kind = LayoutKind::kEmpty;
  int ndims = 0;
  int64_t base = 0;
  int64_t total = 0;
  int64_t block_len = 0;
  Dim dims[kMaxDims] = {};
  const Block* blocks = nullptr;
  const int64_t* prefix = nullptr;
  int64_t nblocks = 0;
  int64_t tile_bytes = 0;
};

// Offset of the idx-th repetition over dims (idx in row-major order).
LOOM_HD int64_t dims_offset(const Dim* dims, int nd, int64_t idx) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    int64_t c = dims[d].count;
    int64_t q = idx / c;
    off += (idx - q * c) * dims[d].stride;
    idx = q;
  }
  return off;
}

// Index of the block whose packed range holds byte `within` of a tile:
// the last b with prefix[b] <= within (prefix is non-decreasing, prefix[0] = 0).
LOOM_HD int64_t find_block(const int64_t* prefix, int64_t nblocks, int64_t within) {
  int64_t lo = 0, hi = nblocks;  // answer in [lo, hi)
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (prefix[mid] <= within)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// Buffer offset of packed byte p (0 <= p < total).
LOOM_HD int64_t packed_to_offset(const LayoutView& v, int64_t p) {
  switch (v.kind) {
    case LayoutKind::kContiguous:
      return v.base + p;
    case LayoutKind::kStrided: {
      int64_t b = p / v.block_len;
      return v.base + dims_offset(v.dims, v.ndims, b) + (p - b * v.block_len);
    }
    case LayoutKind::kBlocks: {
      int64_t t = p / v.tile_bytes;
      int64_t w = p - t * v.tile_bytes;
      int64_t b = find_block(v.prefix, v.nblocks, w);
      return v.base + dims_offset(v.dims, v.ndims, t) + v.blocks[b].off + (w - v.prefix[b]);
    }
    default:
      return 0;
  }
}

}  // namespace loom::pack
