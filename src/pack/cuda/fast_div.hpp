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

// Quotient of n / v.d (n >= 0); the remainder goes to *rem.
LOOM_HD int64_t divmod(const Divisor& v, int64_t n, int64_t* rem) {
  if (static_cast<uint64_t>(n) <= 0xFFFFFFFFu) {
    if (!v.small) {  // n < 2^32 <= d
      *rem = n;
      return 0;
    }
    uint32_t q = fast_div(v.f, static_cast<uint32_t>(n));
    *rem = n - static_cast<int64_t>(q) * v.d;
    return q;
  }
  int64_t q = n / v.d;
  *rem = n - q * v.d;
  return q;
}

// Dimensions with their divisors: what a kernel needs to place the idx-th
// repetition (row-major, innermost fastest) without hardware division.
struct FastDims {
  int nd = 0;
  Divisor count[kMaxDims];
  int64_t stride[kMaxDims] = {};
};

inline FastDims make_fast_dims(const Dim* dims, int nd) {
  FastDims f;
  f.nd = nd;
  for (int d = 0; d < nd; ++d) {
    f.count[d] = make_divisor(dims[d].count);
    f.stride[d] = dims[d].stride;
  }
  return f;
}

// Same value as dims_offset(dims, nd, idx) for 0 <= idx < product of counts.
// Loops run over the fixed kMaxDims bound so every array index is a constant
// after unrolling (the arguments stay in the kernel's parameter space instead
// of being copied to local memory). The outermost dimension takes the rest.
LOOM_HD int64_t fast_dims_offset(const FastDims& f, int64_t idx) {
  int64_t off = 0;
  LOOM_UNROLL
  for (int d = kMaxDims - 1; d >= 1; --d) {
    if (d < f.nd) {
      int64_t r;
      idx = divmod(f.count[d], idx, &r);
      off += r * f.stride[d];
    }
  }
  if (f.nd > 0) off += idx * f.stride[0];
  return off;
}

}  // namespace loom::pack::gpu
