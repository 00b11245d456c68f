// The host fold: tiles of elements copied into local arrays (so pointers need
// no alignment and `out` may be one of the inputs), folded input by input.
// Compiled without floating-point contraction (src/CMakeLists.txt).
#include <algorithm>
#include <cstring>

#include "coll/reduce_elem.hpp"
#include "coll/reduce_op.hpp"

namespace loom::coll {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "SUM";
    case ReduceOp::kProd:
      return "PROD";
    case ReduceOp::kMin:
      return "MIN";
    case ReduceOp::kMax:
      return "MAX";
    case ReduceOp::kLand:
      return "LAND";
    case ReduceOp::kLor:
      return "LOR";
    case ReduceOp::kLxor:
      return "LXOR";
    case ReduceOp::kBand:
      return "BAND";
    case ReduceOp::kBor:
      return "BOR";
    case ReduceOp::kBxor:
      return "BXOR";
    case ReduceOp::kMinloc:
      return "MINLOC";
    case ReduceOp::kMaxloc:
      return "MAXLOC";
    case ReduceOp::kReplace:
      return "REPLACE";
    case ReduceOp::kNoOp:
      return "NO_OP";
  }
  return "?";
}

const char* basic_name(Basic b) {
  switch (b) {
    case Basic::kInt8:
      return "int8";
    case Basic::kUint8:
      return "uint8";
    case Basic::kInt16:
      return "int16";
    case Basic::kUint16:
      return "uint16";
    case Basic::kInt32:
      return "int32";
    case Basic::kUint32:
      return "uint32";
    case Basic::kInt64:
      return "int64";
    case Basic::kUint64:
      return "uint64";
    case Basic::kFloat:
      return "float";
    case Basic::kDouble:
      return "double";
    case Basic::kBool:
      return "bool";
    case Basic::kCFloat:
      return "cfloat";
    case Basic::kCDouble:
      return "cdouble";
    case Basic::kFloatInt:
      return "float_int";
    case Basic::kDoubleInt:
      return "double_int";
    case Basic::kLongInt:
      return "long_int";
    case Basic::kTwoInt:
      return "2int";
    case Basic::kShortInt:
      return "short_int";
    case Basic::kTwoFloat:
      return "2float";
    case Basic::kTwoDouble:
      return "2double";
  }
  return "?";
}

size_t basic_size(Basic b) {
  switch (b) {
    case Basic::kInt8:
    case Basic::kUint8:
    case Basic::kBool:
      return 1;
    case Basic::kInt16:
    case Basic::kUint16:
      return 2;
    case Basic::kInt32:
    case Basic::kUint32:
    case Basic::kFloat:
      return 4;
    case Basic::kInt64:
    case Basic::kUint64:
    case Basic::kDouble:
    case Basic::kCFloat:
      return 8;
    case Basic::kCDouble:
      return 16;
    case Basic::kFloatInt:
      return sizeof(elem::FloatInt);
    case Basic::kDoubleInt:
      return sizeof(elem::DoubleInt);
    case Basic::kLongInt:
      return sizeof(elem::LongInt);
    case Basic::kTwoInt:
      return sizeof(elem::TwoInt);
    case Basic::kShortInt:
      return sizeof(elem::ShortInt);
    case Basic::kTwoFloat:
      return sizeof(elem::TwoFloat);
    case Basic::kTwoDouble:
      return sizeof(elem::TwoDouble);
  }
  return 0;
}

namespace {

enum Group : unsigned {
  kInt = 1,
  kFp = 2,
  kComplex = 4,
  kBoolean = 8,
  kPair = 16,
};

unsigned group_of(Basic b) {
  switch (b) {
    case Basic::kInt8:
    case Basic::kUint8:
    case Basic::kInt16:
    case Basic::kUint16:
    case Basic::kInt32:
    case Basic::kUint32:
    case Basic::kInt64:
    case Basic::kUint64:
      return kInt;
    case Basic::kFloat:
    case Basic::kDouble:
      return kFp;
    case Basic::kBool:
      return kBoolean;
    case Basic::kCFloat:
    case Basic::kCDouble:
      return kComplex;
    default:
      return kPair;
  }
}

// Stores one element; padded pairs field by field (padding untouched).
template <class T>
void store(char* p, const T& v) {
  if constexpr (elem::Padded<T>::value) {
    std::memcpy(p + offsetof(T, v), &v.v, sizeof v.v);
    std::memcpy(p + offsetof(T, k), &v.k, sizeof v.k);
  } else {
    std::memcpy(p, &v, sizeof v);
  }
}

constexpr size_t kTileBytes = 4096;

template <class T, class Op>
void fold(const void* const* in, int n, char* out, size_t count) {
  constexpr size_t kTile = kTileBytes / sizeof(T);
  T acc[kTile];
  T x[kTile];
  const Op op{};
  for (size_t i0 = 0; i0 < count; i0 += kTile) {
    const size_t m = std::min(kTile, count - i0);
    const size_t at = i0 * sizeof(T);
    std::memcpy(acc, static_cast<const char*>(in[0]) + at, m * sizeof(T));
    for (int k = 1; k < n; ++k) {
      std::memcpy(x, static_cast<const char*>(in[k]) + at, m * sizeof(T));
      for (size_t j = 0; j < m; ++j) acc[j] = op(acc[j], x[j]);
    }
    if constexpr (elem::Padded<T>::value) {
      for (size_t j = 0; j < m; ++j) store(out + at + j * sizeof(T), acc[j]);
    } else {
      std::memcpy(out + at, acc, m * sizeof(T));
    }
  }
}

}  // namespace

bool reduce_defined(ReduceOp op, Basic b) {
  const unsigned g = group_of(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
      return (g & (kInt | kFp | kComplex)) != 0;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return (g & (kInt | kFp)) != 0;
    case ReduceOp::kLand:
    case ReduceOp::kLor:
    case ReduceOp::kLxor:
      return (g & (kInt | kBoolean)) != 0;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      return g == kInt;
    case ReduceOp::kMinloc:
    case ReduceOp::kMaxloc:
      return g == kPair;
    case ReduceOp::kReplace:
    case ReduceOp::kNoOp:
      return true;
  }
  return false;
}

Status host_reduce(ReduceOp op, Basic b, const void* const* in, int n, void* out, size_t count) {
  if (!reduce_defined(op, b))
    return Status(Err::kUnsupported, std::string("MPI_") + reduce_op_name(op) +
                                         " is not defined for " + basic_name(b));
  if (n < 1 || in == nullptr) return Status(Err::kInvalidArg, "host_reduce: no inputs");
  if (count == 0) return Status::ok();
  if (out == nullptr) return Status(Err::kInvalidArg, "host_reduce: null output");
  for (int k = 0; k < n; ++k)
    if (in[k] == nullptr) return Status(Err::kInvalidArg, "host_reduce: null input");
  char* dst = static_cast<char*>(out);

  if (op == ReduceOp::kReplace || op == ReduceOp::kNoOp) {  // a copy of one input
    const void* from = in[op == ReduceOp::kReplace ? n - 1 : 0];
    if (from == dst) return Status::ok();
    const bool padded = elem::dispatch_padded(b, false, [&](auto tag) {
      using T = typename decltype(tag)::type;
      fold<T, elem::Copy>(&from, 1, dst, count);
      return true;
    });
    if (!padded) std::memcpy(dst, from, count * basic_size(b));
    return Status::ok();
  }
  const bool done = elem::dispatch(op, b, false, [&](auto tag, auto opv, size_t per) {
    using T = typename decltype(tag)::type;
    fold<T, decltype(opv)>(in, n, dst, count * per);
    return true;
  });
  if (!done) return Status(Err::kInternal, "host_reduce: no fold for a defined pair");
  return Status::ok();
}

}  // namespace loom::coll
