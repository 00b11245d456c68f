// The reduction arithmetic of GPU-aware collectives, MPI-free: which
// (operation, element type) pairs MPI defines, and a host fold that computes
// them with the same bits as the MPI's own host operations (the GPU fold,
// reduce_gpu.hpp, computes the same bits). src/coll/reduce_map.hpp maps
// MPI_Op / MPI_Datatype handles to these enums.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/status.hpp"

namespace loom::coll {

// MPI's predefined operations. kReplace and kNoOp serve accumulate: over the
// inputs in[0..n-1], REPLACE gives the last input and NO_OP the first.
enum class ReduceOp : uint8_t {
  kSum,
  kProd,
  kMin,
  kMax,
  kLand,
  kLor,
  kLxor,
  kBand,
  kBor,
  kBxor,
  kMinloc,
  kMaxloc,
  kReplace,
  kNoOp,
};
inline constexpr int kReduceOpCount = 14;

// Element types, as they sit in user memory: element i at i * basic_size().
// The pair types are the C structs of MPI's MINLOC/MAXLOC types, padding
// included: kFloatInt {float; int} 8 B, kDoubleInt {double; int} 16 B,
// kLongInt {long; int} 16 B (LP64), kTwoInt {int; int} 8 B (also
// MPI_2INTEGER), kShortInt {short; int} 8 B, kTwoFloat {float; float} 8 B
// (MPI_2REAL), kTwoDouble {double; double} 16 B (MPI_2DOUBLE_PRECISION).
// kBool is C _Bool / C++ bool (1 byte, 0 or 1). No long double: the GPU has none.
enum class Basic : uint8_t {
  kInt8,
  kUint8,
  kInt16,
  kUint16,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat,
  kDouble,
  kBool,
  kCFloat,   // float _Complex: {re, im}
  kCDouble,  // double _Complex
  kFloatInt,
  kDoubleInt,
  kLongInt,
  kTwoInt,
  kShortInt,
  kTwoFloat,
  kTwoDouble,
};
inline constexpr int kBasicCount = 20;

const char* reduce_op_name(ReduceOp op);
const char* basic_name(Basic b);

// Bytes of one element (the C type's size, padding included).
size_t basic_size(Basic b);

// MPI's table (MPI-4.1 §6.9.2) at the level of element types: SUM, PROD on
// integers, floats and complex; MIN, MAX on integers and floats; LAND, LOR,
// LXOR on integers and bool; BAND, BOR, BXOR on integers (kUint8 also
// stands for MPI_BYTE); MINLOC, MAXLOC on the pair types; REPLACE, NO_OP on
// everything.
bool reduce_defined(ReduceOp op, Basic b);

// out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], folded left in exactly
// that order, with MPI's operand order: x op y is what MPI_Reduce_local(x, y)
// leaves in y. So the bits equal the MPI's host operations (Open MPI's and
// MPICH's agree): MIN is (y < x) ? y : x and MAX (y > x) ? y : x (on equal
// or unordered values the earlier operand wins, NaNs included); MINLOC and
// MAXLOC compare values and on equal values keep the later value with the
// smaller index; complex PROD is C's y * x (C99 Annex G recovery of
// infinities); logical operations give 0 or 1; integer SUM and PROD wrap.
// Padding bytes of `out` (pair types) are never written. `out` may be one
// of the inputs (the same pointer); other overlaps are not allowed.
// Pointers need no alignment. n >= 1. Undefined pairs: Err::kUnsupported.
Status host_reduce(ReduceOp op, Basic b, const void* const* in, int n, void* out, size_t count);

}  // namespace loom::coll
