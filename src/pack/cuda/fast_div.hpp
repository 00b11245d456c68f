// Division by a divisor fixed at plan time, shared by host and device: the
// kernels split flat indices into (unit, word) and per-dimension digits, and
// 64-bit hardware division costs tens of instructions on the GPU.
#pragma once

#include <cstdint>

#include "pack/index_math.hpp"

#if defined(__CUDA_ARCH__)
#define LOOM_UNROLL _Pragma("unroll")
#else
#define LOOM_UNROLL
#endif

namespace loom::pack::gpu {

// n / d for 32-bit n by the round-up method (Granlund and Montgomery):
// l = ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1, q = (mulhi(m, n) + n) >> l.
// m < 2^32 for every 1 <= d < 2^32, and the sum is formed in 64 bits.
struct FastDiv {
  uint32_t mul = 1;
  uint32_t shift = 0;
};

// Host only (plans are built on the host). d in [1, 2^32 - 1].
inline FastDiv make_fast_div(uint32_t d) {
  FastDiv f;
  uint32_t l = 0;
  while ((uint64_t{1} << l) < d) ++l;
  f.shift = l;
  f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1);
  return f;
}

LOOM_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((uint64_t{a} * b) >> 32);
#endif
}

LOOM_HD uint32_t fast_div(FastDiv f, uint32_t n) {
  return static_cast<uint32_t>((uint64_t{mulhi32(f.mul, n)} + n) >> f.shift);
}

// A divisor usable on any non-negative 64-bit numerator: the 32-bit fast path
// whenever numerator and divisor fit, hardware division otherwise.
struct Divisor {
  int64_t d = 1;
  FastDiv f;
  bool small = true;  // 1 <= d < 2^32: f is valid
};

inline Divisor make_divisor(int64_t d) {
  Divisor v;
  v.d = d < 1 ? 1 : d;
  v.small = v.d <= int64_t{0xFFFFFFFF};
  if (v.small) v.f = make_fast_div(static_cast<uint32_t>(v.d));
  return v;
}

// Past 32 bits: hardware division, kept out of line on the device so the
// common path stays short (kernels pay for instruction fetch: every branch
// over a long block of cold code is an instruction-cache miss).
struct QuotRem {
  int64_t q;
  int64_t r;
};

#if defined(__CUDA_ARCH__)
__device__ __noinline__
#else
inline
#endif
    QuotRem
    divmod_wide(int64_t d, int64_t n) {
  const int64_t q = n / d;
  return {q, n - q * d};
}

// Quotient of n / v.d (n >= 0); the remainder goes to *rem. One branch: the
// multiply-high path whenever n and d fit 32 bits, hardware division else.
LOOM_HD int64_t divmod(const Divisor& v, int64_t n, int64_t* rem) {
  if (static_cast<uint64_t>(n) <= 0xFFFFFFFFu && v.small) {
    const uint32_t q = fast_div(v.f, static_cast<uint32_t>(n));
    *rem = n - static_cast<int64_t>(q) * v.d;
    return q;
  }
  const QuotRem x = divmod_wide(v.d, n);
  *rem = x.r;
  return x.q;
}

// Dimensions with their divisors: what a kernel needs to place the idx-th
// repetition (row-major, innermost fastest) without hardware division. The
// dims that divide are stored innermost first, so a 1-D layout costs one
// compare and no division (the outermost dimension takes the rest).
struct FastDims {
  int nd = 0;
  int ninner = 0;               // max(nd - 1, 0): the dims that divide
  Divisor count[kMaxDims - 1];  // inner dims, innermost first
  int64_t stride[kMaxDims - 1] = {};
  int64_t outer_stride = 0;  // dims[0].stride (0 when nd == 0)
};

inline FastDims make_fast_dims(const Dim* dims, int nd) {
  FastDims f;
  f.nd = nd;
  f.ninner = nd > 1 ? nd - 1 : 0;
  for (int j = 0; j < f.ninner; ++j) {
    f.count[j] = make_divisor(dims[nd - 1 - j].count);
    f.stride[j] = dims[nd - 1 - j].stride;
  }
  f.outer_stride = nd > 0 ? dims[0].stride : 0;
  return f;
}

// Same value as dims_offset(dims, nd, idx) for 0 <= idx < product of counts.
// A rolled loop: the kernels take their arguments as __grid_constant__, so
// f.count[j] is read from the parameter bank with a register index (no local
// copy), and the code stays short (unrolled over kMaxDims, with four or eight
// copies per thread, the words kernels were twice the size and slower).
LOOM_HD int64_t fast_dims_offset(const FastDims& f, int64_t idx) {
  int64_t off = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
  for (int j = 0; j < f.ninner; ++j) {
    int64_t r;
    idx = divmod(f.count[j], idx, &r);
    off += r * f.stride[j];
  }
  return off + idx * f.outer_stride;
}

}  // namespace loom::pack::gpu
