// host_reduce: MPI's table of defined (operation, type) pairs, the left fold
// against a reference written element by element here (std::complex for
// complex PROD, so the compiler's own C99 multiplication is the oracle),
// and the cases where the bits depend on operand order: MIN/MAX on equal
// and unordered values, MINLOC/MAXLOC ties, NaNs, signed zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "coll/reduce_op.hpp"

namespace loom::coll {
namespace {

constexpr ReduceOp kOps[] = {
    ReduceOp::kSum,    ReduceOp::kProd,   ReduceOp::kMin,     ReduceOp::kMax, ReduceOp::kLand,
    ReduceOp::kLor,    ReduceOp::kLxor,   ReduceOp::kBand,    ReduceOp::kBor, ReduceOp::kBxor,
    ReduceOp::kMinloc, ReduceOp::kMaxloc, ReduceOp::kReplace, ReduceOp::kNoOp};
constexpr Basic kBasics[] = {
    Basic::kInt8,    Basic::kUint8,  Basic::kInt16,    Basic::kUint16,   Basic::kInt32,
    Basic::kUint32,  Basic::kInt64,  Basic::kUint64,   Basic::kFloat,    Basic::kDouble,
    Basic::kBool,    Basic::kCFloat, Basic::kCDouble,  Basic::kFloatInt, Basic::kDoubleInt,
    Basic::kLongInt, Basic::kTwoInt, Basic::kShortInt, Basic::kTwoFloat, Basic::kTwoDouble};
static_assert(std::size(kOps) == kReduceOpCount && std::size(kBasics) == kBasicCount);

bool is_int(Basic b) {
  return static_cast<int>(b) <= static_cast<int>(Basic::kUint64);
}
bool is_fp(Basic b) {
  return b == Basic::kFloat || b == Basic::kDouble;
}
bool is_complex(Basic b) {
  return b == Basic::kCFloat || b == Basic::kCDouble;
}
bool is_pair(Basic b) {
  return static_cast<int>(b) >= static_cast<int>(Basic::kFloatInt);
}

std::string name(ReduceOp op, Basic b) {
  return std::string(reduce_op_name(op)) + "/" + basic_name(b);
}

// ---------------------------------------------------------------------------
// The table.

TEST(ReduceHost, DefinedTableIsMpis) {
  int defined = 0;
  for (ReduceOp op : kOps)
    for (Basic b : kBasics) {
      bool want = false;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kProd:
          want = is_int(b) || is_fp(b) || is_complex(b);
          break;
        case ReduceOp::kMin:
        case ReduceOp::kMax:
          want = is_int(b) || is_fp(b);
          break;
        case ReduceOp::kLand:
        case ReduceOp::kLor:
        case ReduceOp::kLxor:
          want = is_int(b) || b == Basic::kBool;
          break;
        case ReduceOp::kBand:
        case ReduceOp::kBor:
        case ReduceOp::kBxor:
          want = is_int(b);
          break;
        case ReduceOp::kMinloc:
        case ReduceOp::kMaxloc:
          want = is_pair(b);
          break;
        case ReduceOp::kReplace:
        case ReduceOp::kNoOp:
          want = true;
          break;
      }
      EXPECT_EQ(reduce_defined(op, b), want) << name(op, b);
      defined += want;
      unsigned char x[16] = {}, y[16] = {};
      const void* in[] = {x};
      const Status s = host_reduce(op, b, in, 1, y, 1);
      EXPECT_EQ(s.is_ok(), want) << name(op, b);
      if (!want) {
        EXPECT_EQ(s.code(), Err::kUnsupported) << name(op, b);
      }
    }
  EXPECT_EQ(defined, 80 + 8 + 3 + 4 + 14 + 40);
}

TEST(ReduceHost, Sizes) {
  const size_t want[] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 8, 16, 8, 16, 16, 8, 8, 8, 16};
  for (size_t i = 0; i < std::size(kBasics); ++i)
    EXPECT_EQ(basic_size(kBasics[i]), want[i]) << basic_name(kBasics[i]);
}

TEST(ReduceHost, BadArguments) {
  int32_t x = 1, y = 0;
  const void* in[] = {&x, nullptr};
  EXPECT_EQ(host_reduce(ReduceOp::kSum, Basic::kInt32, in, 0, &y, 1).code(), Err::kInvalidArg);
  EXPECT_EQ(host_reduce(ReduceOp::kSum, Basic::kInt32, in, 2, &y, 1).code(), Err::kInvalidArg);
  EXPECT_EQ(host_reduce(ReduceOp::kSum, Basic::kInt32, in, 1, nullptr, 1).code(), Err::kInvalidArg);
  EXPECT_TRUE(host_reduce(ReduceOp::kSum, Basic::kInt32, in, 1, nullptr, 0).is_ok());
  EXPECT_EQ(host_reduce(ReduceOp::kMin, Basic::kCFloat, in, 1, &y, 1).code(), Err::kUnsupported);
}

// ---------------------------------------------------------------------------
// The reference: op(x, y), x the fold so far and y the next input, as
// MPI_Reduce_local(x, y) leaves it in y, written from the MPI's definitions.

template <class T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void put(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

template <class T>
void ref_int(ReduceOp op, const unsigned char* xp, const unsigned char* yp, unsigned char* r) {
  const T x = get<T>(xp), y = get<T>(yp);
  using U = std::make_unsigned_t<T>;
  const uint64_t ux = static_cast<U>(x), uy = static_cast<U>(y);
  switch (op) {
    case ReduceOp::kSum:
      put(r, static_cast<T>(static_cast<U>(ux + uy)));
      break;
    case ReduceOp::kProd:
      put(r, static_cast<T>(static_cast<U>(ux * uy)));
      break;
    case ReduceOp::kMin:
      put(r, std::min(x, y));
      break;
    case ReduceOp::kMax:
      put(r, std::max(x, y));
      break;
    case ReduceOp::kLand:
      put(r, static_cast<T>(x && y));
      break;
    case ReduceOp::kLor:
      put(r, static_cast<T>(x || y));
      break;
    case ReduceOp::kLxor:
      put(r, static_cast<T>(!x != !y));
      break;
    case ReduceOp::kBand:
      put(r, static_cast<T>(x & y));
      break;
    case ReduceOp::kBor:
      put(r, static_cast<T>(x | y));
      break;
    case ReduceOp::kBxor:
      put(r, static_cast<T>(x ^ y));
      break;
    default:
      FAIL();
  }
}

template <class T>
void ref_fp(ReduceOp op, const unsigned char* xp, const unsigned char* yp, unsigned char* r) {
  const T x = get<T>(xp), y = get<T>(yp);
  switch (op) {
    case ReduceOp::kSum:
      put(r, T(y + x));
      break;
    case ReduceOp::kProd:
      put(r, T(y * x));
      break;
    case ReduceOp::kMin:
      put(r, y < x ? y : x);
      break;  // Open MPI's and MPICH's expression
    case ReduceOp::kMax:
      put(r, y > x ? y : x);
      break;
    default:
      FAIL();
  }
}

template <class R>
void ref_complex(ReduceOp op, const unsigned char* xp, const unsigned char* yp, unsigned char* r) {
  const std::complex<R> x = get<std::complex<R>>(xp), y = get<std::complex<R>>(yp);
  put(r, op == ReduceOp::kSum ? y + x : y * x);  // the compiler's C99 multiplication
}

template <class V, class K>
void ref_pair(ReduceOp op, const unsigned char* xp, const unsigned char* yp, unsigned char* r,
              size_t koff) {
  const V xv = get<V>(xp), yv = get<V>(yp);
  const K xk = get<K>(xp + koff), yk = get<K>(yp + koff);
  const bool x_wins = op == ReduceOp::kMinloc ? xv < yv : xv > yv;
  if (x_wins) {
    put(r, xv);
    put(r + koff, xk);
  } else if (xv == yv) {
    put(r, yv);
    put(r + koff, std::min(xk, yk));
  } else {
    put(r, yv);
    put(r + koff, yk);
  }
}

// r = op(x, y) for one element; r's padding bytes are left alone.
void ref(ReduceOp op, Basic b, const unsigned char* x, const unsigned char* y, unsigned char* r) {
  if (op == ReduceOp::kReplace || op == ReduceOp::kNoOp) {
    const unsigned char* from = op == ReduceOp::kReplace ? y : x;
    switch (b) {
      case Basic::kDoubleInt:
      case Basic::kLongInt:
        std::memcpy(r, from, 12);
        return;
      case Basic::kShortInt:
        std::memcpy(r, from, 2);
        std::memcpy(r + 4, from + 4, 4);
        return;
      default:
        std::memcpy(r, from, basic_size(b));
        return;
    }
  }
  switch (b) {
    case Basic::kInt8:
      return ref_int<int8_t>(op, x, y, r);
    case Basic::kUint8:
      return ref_int<uint8_t>(op, x, y, r);
    case Basic::kInt16:
      return ref_int<int16_t>(op, x, y, r);
    case Basic::kUint16:
      return ref_int<uint16_t>(op, x, y, r);
    case Basic::kInt32:
      return ref_int<int32_t>(op, x, y, r);
    case Basic::kUint32:
      return ref_int<uint32_t>(op, x, y, r);
    case Basic::kInt64:
      return ref_int<int64_t>(op, x, y, r);
    case Basic::kUint64:
      return ref_int<uint64_t>(op, x, y, r);
    case Basic::kFloat:
      return ref_fp<float>(op, x, y, r);
    case Basic::kDouble:
      return ref_fp<double>(op, x, y, r);
    case Basic::kBool:
      return ref_int<uint8_t>(op, x, y, r);
    case Basic::kCFloat:
      return ref_complex<float>(op, x, y, r);
    case Basic::kCDouble:
      return ref_complex<double>(op, x, y, r);
    case Basic::kFloatInt:
      return ref_pair<float, int32_t>(op, x, y, r, 4);
    case Basic::kDoubleInt:
      return ref_pair<double, int32_t>(op, x, y, r, 8);
    case Basic::kLongInt:
      return ref_pair<int64_t, int32_t>(op, x, y, r, 8);
    case Basic::kTwoInt:
      return ref_pair<int32_t, int32_t>(op, x, y, r, 4);
    case Basic::kShortInt:
      return ref_pair<int16_t, int32_t>(op, x, y, r, 4);
    case Basic::kTwoFloat:
      return ref_pair<float, float>(op, x, y, r, 4);
    case Basic::kTwoDouble:
      return ref_pair<double, double>(op, x, y, r, 8);
  }
}

// Values that make ties, wraps, signed zeros and special floats likely.
template <class T>
T pick_fp(std::mt19937_64& rng) {
  switch (rng() % 10) {
    case 0:
      return T(0);
    case 1:
      return -T(0);
    case 2:
      return std::numeric_limits<T>::infinity();
    case 3:
      return -std::numeric_limits<T>::infinity();
    case 4:
      return T(static_cast<int>(rng() % 5) - 2);
    default:
      return std::ldexp(T(static_cast<int64_t>(rng() % 2000001) - 1000000), -12);
  }
}

void fill_value(Basic b, std::mt19937_64& rng, unsigned char* p) {
  const size_t size = basic_size(b);
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<unsigned char>(rng());  // padding too
  if (is_int(b) && rng() % 2) {  // small values: ties, zeros
    const int64_t v = static_cast<int64_t>(rng() % 5) - 2;
    std::memcpy(p, &v, size);  // little endian: the low bytes
  }
  switch (b) {
    case Basic::kBool:
      p[0] = static_cast<unsigned char>(rng() % 2);
      break;
    case Basic::kFloat:
      put(p, pick_fp<float>(rng));
      break;
    case Basic::kDouble:
      put(p, pick_fp<double>(rng));
      break;
    case Basic::kCFloat:
      put(p, pick_fp<float>(rng));
      put(p + 4, pick_fp<float>(rng));
      break;
    case Basic::kCDouble:
      put(p, pick_fp<double>(rng));
      put(p + 8, pick_fp<double>(rng));
      break;
    case Basic::kFloatInt:
      put(p, pick_fp<float>(rng));
      put(p + 4, static_cast<int32_t>(rng() % 8));
      break;
    case Basic::kDoubleInt:
      put(p, pick_fp<double>(rng));
      put(p + 8, static_cast<int32_t>(rng() % 8));
      break;
    case Basic::kLongInt:
      put(p, static_cast<int64_t>(rng() % 4) - 2);
      put(p + 8, static_cast<int32_t>(rng() % 8));
      break;
    case Basic::kTwoInt:
      put(p, static_cast<int32_t>(rng() % 4) - 2);
      put(p + 4, static_cast<int32_t>(rng() % 8));
      break;
    case Basic::kShortInt:
      put(p, static_cast<int16_t>(static_cast<int>(rng() % 4) - 2));
      put(p + 4, static_cast<int32_t>(rng() % 8));
      break;
    case Basic::kTwoFloat:
      put(p, pick_fp<float>(rng));
      put(p + 4, static_cast<float>(rng() % 8));
      break;
    case Basic::kTwoDouble:
      put(p, pick_fp<double>(rng));
      put(p + 8, static_cast<double>(rng() % 8));
      break;
    default:
      break;
  }
}

// Equal bits, or both NaN where SUM/PROD made a NaN (its sign and payload
// depend on the operand order the compiler picked).
bool same(ReduceOp op, Basic b, const unsigned char* x, const unsigned char* y, size_t n) {
  if (std::memcmp(x, y, n) == 0) return true;
  if (op != ReduceOp::kSum && op != ReduceOp::kProd) return false;
  if (b == Basic::kFloat || b == Basic::kCFloat) {
    for (size_t i = 0; i < n; i += 4) {
      const float u = get<float>(x + i), v = get<float>(y + i);
      if (std::memcmp(x + i, y + i, 4) != 0 && !(std::isnan(u) && std::isnan(v))) return false;
    }
    return true;
  }
  if (b == Basic::kDouble || b == Basic::kCDouble) {
    for (size_t i = 0; i < n; i += 8) {
      const double u = get<double>(x + i), v = get<double>(y + i);
      if (std::memcmp(x + i, y + i, 8) != 0 && !(std::isnan(u) && std::isnan(v))) return false;
    }
    return true;
  }
  return false;
}

// Every defined pair, n = 1, 2, 3, 17, against the reference fold; the
// output's padding keeps its sentinel; out == in[0] and out == in[n-1]
// give the same bits; misaligned pointers too.
TEST(ReduceHost, FoldMatchesReference) {
  constexpr size_t kCount = 300;
  for (ReduceOp op : kOps)
    for (Basic b : kBasics) {
      if (!reduce_defined(op, b)) continue;
      const size_t es = basic_size(b);
      for (int n : {1, 2, 3, 17}) {
        SCOPED_TRACE(name(op, b) + " n=" + std::to_string(n));
        std::mt19937_64 rng(1000 * static_cast<uint64_t>(op) + 37 * static_cast<uint64_t>(b) +
                            static_cast<uint64_t>(n));
        // Inputs one byte past an aligned start: no alignment is assumed.
        std::vector<std::vector<unsigned char>> store(static_cast<size_t>(n));
        std::vector<const void*> in(static_cast<size_t>(n));
        for (int k = 0; k < n; ++k) {
          auto& s = store[static_cast<size_t>(k)];
          s.resize(kCount * es + 1);
          for (size_t i = 0; i < kCount; ++i) fill_value(b, rng, s.data() + 1 + i * es);
          in[static_cast<size_t>(k)] = s.data() + 1;
        }
        std::vector<unsigned char> want(kCount * es, 0xA5);
        for (size_t i = 0; i < kCount; ++i) {
          std::vector<unsigned char> acc(es);
          std::memcpy(acc.data(), static_cast<const unsigned char*>(in[0]) + i * es, es);
          for (int k = 1; k < n; ++k) {
            std::vector<unsigned char> r(acc);
            ref(op, b, acc.data(), static_cast<const unsigned char*>(in[k]) + i * es, r.data());
            acc = r;
          }
          std::vector<unsigned char> r(es, 0xA5);  // the data bytes; padding keeps 0xA5
          ref(ReduceOp::kNoOp, b, acc.data(), nullptr, r.data());
          std::memcpy(want.data() + i * es, r.data(), es);
        }
        std::vector<unsigned char> got(kCount * es + 3, 0xA5);
        ASSERT_TRUE(host_reduce(op, b, in.data(), n, got.data() + 3, kCount).is_ok());
        for (size_t i = 0; i < kCount; ++i)
          ASSERT_TRUE(same(op, b, got.data() + 3 + i * es, want.data() + i * es, es))
              << "element " << i;

        // In place: out is in[0], then in[n-1].
        for (int at : {0, n - 1}) {
          std::vector<unsigned char> saved(store[static_cast<size_t>(at)]);
          void* out = store[static_cast<size_t>(at)].data() + 1;
          ASSERT_TRUE(host_reduce(op, b, in.data(), n, out, kCount).is_ok());
          std::vector<unsigned char> ref_out(saved.begin() + 1, saved.end());
          for (size_t i = 0; i < kCount; ++i)  // data bytes of got, padding of the input
            ref(ReduceOp::kNoOp, b, got.data() + 3 + i * es, nullptr, ref_out.data() + i * es);
          ASSERT_EQ(std::memcmp(out, ref_out.data(), kCount * es), 0) << "out == in[" << at << "]";
          store[static_cast<size_t>(at)] = saved;
        }
      }
    }
}

// ---------------------------------------------------------------------------
// Hand-computed cases.

template <class T>
std::vector<T> reduce(ReduceOp op, Basic b, const std::vector<std::vector<T>>& in) {
  std::vector<const void*> p;
  for (const auto& v : in) p.push_back(v.data());
  std::vector<T> out(in[0].size());
  const Status s = host_reduce(op, b, p.data(), static_cast<int>(p.size()), out.data(), out.size());
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

template <class T>
uint64_t bits(T v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}

TEST(ReduceHost, IntegersByHand) {
  // SUM of 17 inputs: in[k][i] = k + i.
  std::vector<std::vector<int32_t>> in(17, std::vector<int32_t>(4));
  for (int k = 0; k < 17; ++k)
    for (int i = 0; i < 4; ++i) in[static_cast<size_t>(k)][static_cast<size_t>(i)] = k + i;
  EXPECT_EQ(reduce(ReduceOp::kSum, Basic::kInt32, in), (std::vector<int32_t>{136, 153, 170, 187}));
  EXPECT_EQ(reduce(ReduceOp::kMax, Basic::kInt32, in), (std::vector<int32_t>{16, 17, 18, 19}));
  EXPECT_EQ(reduce(ReduceOp::kMin, Basic::kInt32, in), (std::vector<int32_t>{0, 1, 2, 3}));
  // One input: a copy.
  EXPECT_EQ(reduce(ReduceOp::kProd, Basic::kInt32, std::vector<std::vector<int32_t>>{{7, -8}}),
            (std::vector<int32_t>{7, -8}));
  // Wrapping.
  EXPECT_EQ(reduce(ReduceOp::kSum, Basic::kInt8, std::vector<std::vector<int8_t>>{{100}, {100}}),
            (std::vector<int8_t>{-56}));
  EXPECT_EQ(
      reduce(ReduceOp::kProd, Basic::kUint16, std::vector<std::vector<uint16_t>>{{65535}, {65535}}),
      (std::vector<uint16_t>{1}));
  EXPECT_EQ(reduce(ReduceOp::kProd, Basic::kInt64,
                   std::vector<std::vector<int64_t>>{{INT64_MAX}, {2}, {3}}),
            (std::vector<int64_t>{static_cast<int64_t>(static_cast<uint64_t>(INT64_MAX) * 6u)}));
  // Signed and unsigned order.
  EXPECT_EQ(reduce(ReduceOp::kMin, Basic::kInt16, std::vector<std::vector<int16_t>>{{-1}, {1}}),
            (std::vector<int16_t>{-1}));
  EXPECT_EQ(
      reduce(ReduceOp::kMin, Basic::kUint16, std::vector<std::vector<uint16_t>>{{65535}, {1}}),
      (std::vector<uint16_t>{1}));
  // Logical: 0 or 1.
  const std::vector<std::vector<int32_t>> lg{{5, 0, 5, 0}, {-3, -3, 0, 0}, {2, 2, 2, 0}};
  EXPECT_EQ(reduce(ReduceOp::kLand, Basic::kInt32, lg), (std::vector<int32_t>{1, 0, 0, 0}));
  EXPECT_EQ(reduce(ReduceOp::kLor, Basic::kInt32, lg), (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(reduce(ReduceOp::kLxor, Basic::kInt32, lg), (std::vector<int32_t>{1, 0, 0, 0}));
  const std::vector<std::vector<uint8_t>> bo{{1, 1, 0, 0}, {1, 0, 1, 0}};
  EXPECT_EQ(reduce(ReduceOp::kLxor, Basic::kBool, bo), (std::vector<uint8_t>{0, 1, 1, 0}));
  // Bitwise.
  const std::vector<std::vector<uint32_t>> bw{{0xF0F0F0F0u}, {0xFF00FF00u}, {0x0F0F0F0Fu}};
  EXPECT_EQ(reduce(ReduceOp::kBand, Basic::kUint32, bw), (std::vector<uint32_t>{0x00000000u}));
  EXPECT_EQ(reduce(ReduceOp::kBor, Basic::kUint32, bw), (std::vector<uint32_t>{0xFFFFFFFFu}));
  EXPECT_EQ(reduce(ReduceOp::kBxor, Basic::kUint32, bw), (std::vector<uint32_t>{0x00FF00FFu}));
}

TEST(ReduceHost, FloatMinMaxKeepTheEarlierOperandOnTiesAndNaNs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float nneg = -std::numeric_limits<float>::quiet_NaN();
  // MIN(x, y) = (y < x) ? y : x: equal or unordered gives x, the earlier.
  auto min2 = [](float x, float y) {
    return reduce(ReduceOp::kMin, Basic::kFloat, std::vector<std::vector<float>>{{x}, {y}})[0];
  };
  auto max2 = [](float x, float y) {
    return reduce(ReduceOp::kMax, Basic::kFloat, std::vector<std::vector<float>>{{x}, {y}})[0];
  };
  EXPECT_EQ(bits(min2(0.0f, -0.0f)), bits(0.0f));
  EXPECT_EQ(bits(min2(-0.0f, 0.0f)), bits(-0.0f));
  EXPECT_EQ(bits(max2(0.0f, -0.0f)), bits(0.0f));
  EXPECT_EQ(bits(max2(-0.0f, 0.0f)), bits(-0.0f));
  EXPECT_EQ(bits(min2(nan, 1.0f)), bits(nan));
  EXPECT_EQ(bits(min2(1.0f, nan)), bits(1.0f));
  EXPECT_EQ(bits(max2(nneg, 1.0f)), bits(nneg));
  EXPECT_EQ(bits(max2(1.0f, nan)), bits(1.0f));
  EXPECT_EQ(min2(2.0f, 1.0f), 1.0f);
  EXPECT_EQ(max2(2.0f, 1.0f), 2.0f);
  // Three inputs: a NaN in the middle is skipped, a leading one sticks.
  EXPECT_EQ(
      reduce(ReduceOp::kMin, Basic::kFloat, std::vector<std::vector<float>>{{3}, {nan}, {1}})[0],
      1.0f);
  EXPECT_TRUE(std::isnan(
      reduce(ReduceOp::kMax, Basic::kFloat, std::vector<std::vector<float>>{{nan}, {3}, {1}})[0]));
  // SUM with a NaN is a NaN; the left fold rounds as written: (1e16 + 1) + -1e16.
  EXPECT_TRUE(std::isnan(
      reduce(ReduceOp::kSum, Basic::kDouble, std::vector<std::vector<double>>{{1}, {nan}})[0]));
  EXPECT_EQ(reduce(ReduceOp::kSum, Basic::kDouble,
                   std::vector<std::vector<double>>{{1e16}, {1}, {-1e16}})[0],
            0.0);
  EXPECT_EQ(reduce(ReduceOp::kSum, Basic::kDouble,
                   std::vector<std::vector<double>>{{1e16}, {-1e16}, {1}})[0],
            1.0);
}

struct FI {
  float v;
  int32_t k;
};
struct DI {
  double v;
  int32_t k;
};

TEST(ReduceHost, MinlocMaxlocTies) {
  // Equal values: the smallest index, whatever the order.
  std::vector<std::vector<FI>> in{
      {{1, 5}, {2, 0}, {0.0f, 2}}, {{1, 3}, {2, 9}, {-0.0f, 1}}, {{1, 4}, {1, 7}, {0.0f, 3}}};
  auto mn = reduce(ReduceOp::kMinloc, Basic::kFloatInt, in);
  EXPECT_EQ(mn[0].v, 1.0f);
  EXPECT_EQ(mn[0].k, 3);
  EXPECT_EQ(mn[1].v, 1.0f);
  EXPECT_EQ(mn[1].k, 7);
  EXPECT_EQ(mn[2].k, 1);                 // +0 == -0: smallest index
  EXPECT_EQ(bits(mn[2].v), bits(0.0f));  // and the later operand's value
  auto mx = reduce(ReduceOp::kMaxloc, Basic::kFloatInt, in);
  EXPECT_EQ(mx[0].k, 3);
  EXPECT_EQ(mx[1].v, 2.0f);
  EXPECT_EQ(mx[1].k, 0);
  // NaN: neither smaller nor equal, so the later operand stands.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto a = reduce(ReduceOp::kMinloc, Basic::kFloatInt,
                  std::vector<std::vector<FI>>{{{nan, 0}}, {{1, 1}}});
  EXPECT_EQ(a[0].v, 1.0f);
  EXPECT_EQ(a[0].k, 1);
  auto c = reduce(ReduceOp::kMinloc, Basic::kFloatInt,
                  std::vector<std::vector<FI>>{{{1, 0}}, {{nan, 1}}});
  EXPECT_TRUE(std::isnan(c[0].v));
  EXPECT_EQ(c[0].k, 1);
}

TEST(ReduceHost, PairPaddingIsNotWritten) {
  std::vector<unsigned char> x(32), y(32), out(32, 0xEE);
  const DI a[2] = {{1.0, 4}, {5.0, 1}}, b[2] = {{1.0, 2}, {3.0, 0}};
  std::memcpy(x.data(), a, 32);
  std::memcpy(y.data(), b, 32);
  const void* in[] = {x.data(), y.data()};
  for (ReduceOp op : {ReduceOp::kMaxloc, ReduceOp::kReplace, ReduceOp::kNoOp}) {
    ASSERT_TRUE(host_reduce(op, Basic::kDoubleInt, in, 2, out.data(), 2).is_ok());
    for (int e = 0; e < 2; ++e)
      for (int i = 12; i < 16; ++i) EXPECT_EQ(out[static_cast<size_t>(16 * e + i)], 0xEE);
  }
  DI r[2];
  std::memcpy(r, out.data(), 32);  // NO_OP: the first input
  EXPECT_EQ(r[0].k, 4);
  EXPECT_EQ(r[1].v, 5.0);
  ASSERT_TRUE(host_reduce(ReduceOp::kReplace, Basic::kDoubleInt, in, 2, out.data(), 2).is_ok());
  std::memcpy(r, out.data(), 32);  // REPLACE: the last
  EXPECT_EQ(r[0].k, 2);
  EXPECT_EQ(r[1].v, 3.0);
}

// Complex PROD is C's y * x, infinities recovered as C99 Annex G says.
TEST(ReduceHost, ComplexProduct) {
  using C = std::complex<float>;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto prod = [](C x, C y) {
    return reduce(ReduceOp::kProd, Basic::kCFloat, std::vector<std::vector<C>>{{x}, {y}})[0];
  };
  EXPECT_EQ(prod({1, 2}, {3, 4}), C(-5, 10));
  const C r = prod({inf, inf}, {1, 0});  // naive: NaN + NaN i
  EXPECT_EQ(r.real(), inf);
  EXPECT_EQ(r.imag(), inf);
  const C s = prod({1, 0}, {inf, nan});
  EXPECT_TRUE(std::isinf(s.real()));
  const C t = prod({1e30f, 1e30f}, {1e30f, -1e30f});  // overflow: ac, bd infinite
  EXPECT_TRUE(std::isinf(t.real()));
  // Against the compiler's own operator*, over special values.
  const float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, inf, -inf, nan, 1e30f, -1e30f};
  for (float a : vals)
    for (float b : vals)
      for (float c : vals)
        for (float d : vals) {
          const C x(a, b), y(c, d);
          const C want = y * x;
          const C got = prod(x, y);
          const bool ok_re = bits(got.real()) == bits(want.real()) ||
                             (std::isnan(got.real()) && std::isnan(want.real()));
          const bool ok_im = bits(got.imag()) == bits(want.imag()) ||
                             (std::isnan(got.imag()) && std::isnan(want.imag()));
          ASSERT_TRUE(ok_re && ok_im) << a << " " << b << " " << c << " " << d;
        }
}

}  // namespace
}  // namespace loom::coll
