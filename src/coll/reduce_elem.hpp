// The element operations of host_reduce and gpu_reduce, written once for
// both sides (plain __host__ __device__ code, as pack/index_math.hpp is), and
// the one dispatch from (ReduceOp, Basic) to an element type and an
// operation that both folds use, so the host and the GPU cannot disagree on
// what a pair computes.
//
// Every operation is op(x, y) with x the earlier operand (the fold so far)
// and y the next input: MPI_Reduce_local(x, y) leaves op(x, y) in y, and
// both Open MPI and MPICH compute y = f(y, x) with the expressions below.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "coll/reduce_op.hpp"

#ifndef LOOM_HD
#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif
#endif

namespace loom::coll::elem {

// MINLOC/MAXLOC elements: the C structs, padding included.
template <class V, class K>
struct Pair {
  V v;
  K k;
};
using FloatInt = Pair<float, int32_t>;
using DoubleInt = Pair<double, int32_t>;
using LongInt = Pair<int64_t, int32_t>;
using TwoInt = Pair<int32_t, int32_t>;
using ShortInt = Pair<int16_t, int32_t>;
using TwoFloat = Pair<float, float>;
using TwoDouble = Pair<double, double>;
static_assert(sizeof(FloatInt) == 8 && sizeof(DoubleInt) == 16 && sizeof(LongInt) == 16 &&
              sizeof(TwoInt) == 8 && sizeof(ShortInt) == 8 && sizeof(TwoFloat) == 8 &&
              sizeof(TwoDouble) == 16);

template <class R>
struct Cplx {
  R re;
  R im;
};

// Pair types with padding bytes: stored field by field, so that padding in
// the output is never written (as MPI's own operations leave it).
template <class T>
struct Padded : std::false_type {};
template <class V, class K>
struct Padded<Pair<V, K>> : std::bool_constant<sizeof(Pair<V, K>) != sizeof(V) + sizeof(K)> {};

template <class R>
LOOM_HD bool is_nan(R x) {
  return !(x == x);
}
template <class R>
LOOM_HD bool is_inf(R x) {
  return x == R(INFINITY) || x == -R(INFINITY);
}
LOOM_HD float copy_sign(float m, float s) {
  return copysignf(m, s);
}
LOOM_HD double copy_sign(double m, double s) {
  return copysign(m, s);
}

// z * w as C computes it for _Complex operands (C99 Annex G, the algorithm of
// libgcc's __mulsc3/__muldc3, which GCC calls when both parts come out NaN).
// No fused multiply-adds: this code must be compiled without contraction.
template <class R>
LOOM_HD Cplx<R> complex_mul(Cplx<R> z, Cplx<R> w) {
  R a = z.re, b = z.im, c = w.re, d = w.im;
  const R ac = a * c, bd = b * d, ad = a * d, bc = b * c;
  R x = ac - bd;
  R y = ad + bc;
  if (is_nan(x) && is_nan(y)) {
    bool recalc = false;
    if (is_inf(a) || is_inf(b)) {  // z is infinite: box it, NaNs of w to 0
      a = copy_sign(is_inf(a) ? R(1) : R(0), a);
      b = copy_sign(is_inf(b) ? R(1) : R(0), b);
      if (is_nan(c)) c = copy_sign(R(0), c);
      if (is_nan(d)) d = copy_sign(R(0), d);
      recalc = true;
    }
    if (is_inf(c) || is_inf(d)) {  // w is infinite
      c = copy_sign(is_inf(c) ? R(1) : R(0), c);
      d = copy_sign(is_inf(d) ? R(1) : R(0), d);
      if (is_nan(a)) a = copy_sign(R(0), a);
      if (is_nan(b)) b = copy_sign(R(0), b);
      recalc = true;
    }
    if (!recalc && (is_inf(ac) || is_inf(bd) || is_inf(ad) || is_inf(bc))) {
      // Infinities from overflow: NaNs to 0.
      if (is_nan(a)) a = copy_sign(R(0), a);
      if (is_nan(b)) b = copy_sign(R(0), b);
      if (is_nan(c)) c = copy_sign(R(0), c);
      if (is_nan(d)) d = copy_sign(R(0), d);
      recalc = true;
    }
    if (recalc) {
      x = R(INFINITY) * (a * c - b * d);
      y = R(INFINITY) * (a * d + b * c);
    }
  }
  return {x, y};
}

// Integer SUM and PROD wrap: computed unsigned, at least 32 bits wide (no
// promotion to int, so no signed overflow).
template <class T>
using Wide = std::conditional_t<(sizeof(T) < 4), uint32_t, T>;

struct IntSum {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>(static_cast<Wide<T>>(y) + static_cast<Wide<T>>(x));
  }
};
struct IntProd {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>(static_cast<Wide<T>>(y) * static_cast<Wide<T>>(x));
  }
};
struct FpSum {  // also complex SUM, part by part
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return y + x;
  }
};
struct FpProd {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return y * x;
  }
};
struct CplxProd {
  template <class R>
  LOOM_HD Cplx<R> operator()(Cplx<R> x, Cplx<R> y) const {
    return complex_mul(y, x);
  }
};
struct Min {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return (y < x) ? y : x;
  }
};
struct Max {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return (y > x) ? y : x;
  }
};
struct Land {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>((y != 0) && (x != 0));
  }
};
struct Lor {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>((y != 0) || (x != 0));
  }
};
struct Lxor {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>((y != 0) != (x != 0));
  }
};
struct Band {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>(y & x);
  }
};
struct Bor {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>(y | x);
  }
};
struct Bxor {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    return static_cast<T>(y ^ x);
  }
};
// On equal values: the later value, the smaller index.
struct Minloc {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    if (x.v < y.v) return x;
    if (x.v == y.v) return T{y.v, (y.k < x.k) ? y.k : x.k};
    return y;
  }
};
struct Maxloc {
  template <class T>
  LOOM_HD T operator()(T x, T y) const {
    if (x.v > y.v) return x;
    if (x.v == y.v) return T{y.v, (y.k < x.k) ? y.k : x.k};
    return y;
  }
};
// A copy of one input (REPLACE, NO_OP: the fold picks which one).
struct Copy {
  template <class T>
  LOOM_HD T operator()(T x, T) const {
    return x;
  }
};

template <class T>
struct Tag {
  using type = T;
};

// What a (ReduceOp, Basic) pair computes: f(Tag<T>{}, Op{}, per) with T the
// element type of the fold and per the T's per user element (2 for complex
// SUM, the element's bytes for the bitwise operations, which run on bytes).
// REPLACE and NO_OP are not dispatched here (they copy one input). Returns
// what f returns, or `undefined` for pairs this table does not cover.
template <class F, class R>
R dispatch(ReduceOp op, Basic b, R undefined, F&& f) {
  const size_t size = basic_size(b);
  auto by_width = [&](auto opv) -> R {  // unsigned of the element's width
    switch (size) {
      case 1:
        return f(Tag<uint8_t>{}, opv, size_t{1});
      case 2:
        return f(Tag<uint16_t>{}, opv, size_t{1});
      case 4:
        return f(Tag<uint32_t>{}, opv, size_t{1});
      case 8:
        return f(Tag<uint64_t>{}, opv, size_t{1});
      default:
        return undefined;
    }
  };
  auto ordered = [&](auto opv) -> R {  // the element's own type
    switch (b) {
      case Basic::kInt8:
        return f(Tag<int8_t>{}, opv, size_t{1});
      case Basic::kUint8:
        return f(Tag<uint8_t>{}, opv, size_t{1});
      case Basic::kInt16:
        return f(Tag<int16_t>{}, opv, size_t{1});
      case Basic::kUint16:
        return f(Tag<uint16_t>{}, opv, size_t{1});
      case Basic::kInt32:
        return f(Tag<int32_t>{}, opv, size_t{1});
      case Basic::kUint32:
        return f(Tag<uint32_t>{}, opv, size_t{1});
      case Basic::kInt64:
        return f(Tag<int64_t>{}, opv, size_t{1});
      case Basic::kUint64:
        return f(Tag<uint64_t>{}, opv, size_t{1});
      case Basic::kFloat:
        return f(Tag<float>{}, opv, size_t{1});
      case Basic::kDouble:
        return f(Tag<double>{}, opv, size_t{1});
      default:
        return undefined;
    }
  };
  auto floats = [&](auto opv) -> R {
    return b == Basic::kFloat ? f(Tag<float>{}, opv, size_t{1}) : f(Tag<double>{}, opv, size_t{1});
  };
  auto pairs = [&](auto opv) -> R {
    switch (b) {
      case Basic::kFloatInt:
        return f(Tag<FloatInt>{}, opv, size_t{1});
      case Basic::kDoubleInt:
        return f(Tag<DoubleInt>{}, opv, size_t{1});
      case Basic::kLongInt:
        return f(Tag<LongInt>{}, opv, size_t{1});
      case Basic::kTwoInt:
        return f(Tag<TwoInt>{}, opv, size_t{1});
      case Basic::kShortInt:
        return f(Tag<ShortInt>{}, opv, size_t{1});
      case Basic::kTwoFloat:
        return f(Tag<TwoFloat>{}, opv, size_t{1});
      case Basic::kTwoDouble:
        return f(Tag<TwoDouble>{}, opv, size_t{1});
      default:
        return undefined;
    }
  };
  if (!reduce_defined(op, b)) return undefined;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
      if (b == Basic::kCFloat || b == Basic::kCDouble) {
        if (op == ReduceOp::kSum)
          return b == Basic::kCFloat ? f(Tag<float>{}, FpSum{}, size_t{2})
                                     : f(Tag<double>{}, FpSum{}, size_t{2});
        return b == Basic::kCFloat ? f(Tag<Cplx<float>>{}, CplxProd{}, size_t{1})
                                   : f(Tag<Cplx<double>>{}, CplxProd{}, size_t{1});
      }
      if (b == Basic::kFloat || b == Basic::kDouble)
        return op == ReduceOp::kSum ? floats(FpSum{}) : floats(FpProd{});
      return op == ReduceOp::kSum ? by_width(IntSum{}) : by_width(IntProd{});
    case ReduceOp::kMin:
      return ordered(Min{});
    case ReduceOp::kMax:
      return ordered(Max{});
    case ReduceOp::kLand:
      return by_width(Land{});
    case ReduceOp::kLor:
      return by_width(Lor{});
    case ReduceOp::kLxor:
      return by_width(Lxor{});
    case ReduceOp::kBand:
      return f(Tag<uint8_t>{}, Band{}, size);
    case ReduceOp::kBor:
      return f(Tag<uint8_t>{}, Bor{}, size);
    case ReduceOp::kBxor:
      return f(Tag<uint8_t>{}, Bxor{}, size);
    case ReduceOp::kMinloc:
      return pairs(Minloc{});
    case ReduceOp::kMaxloc:
      return pairs(Maxloc{});
    case ReduceOp::kReplace:
    case ReduceOp::kNoOp:
      return undefined;
  }
  return undefined;
}

// The padded pair types, for the field-by-field copies of REPLACE and NO_OP.
template <class F, class R>
R dispatch_padded(Basic b, R other, F&& f) {
  switch (b) {
    case Basic::kDoubleInt:
      return f(Tag<DoubleInt>{});
    case Basic::kLongInt:
      return f(Tag<LongInt>{});
    case Basic::kShortInt:
      return f(Tag<ShortInt>{});
    default:
      return other;
  }
}

}  // namespace loom::coll::elem
