// Predefined MPI_Op and MPI_Datatype handles to ReduceOp and Basic. Handles
// are addresses in Open MPI and constants in MPICH, so the tables are
// searched, not switched on; optional types are guarded by #ifdef (both
// MPIs define their handles as macros).
#include "coll/reduce_map.hpp"

#include <cstddef>
#include <cstdint>

namespace loom::coll {
namespace {

// MPI-4.1 §6.9.2's groups of types.
enum Group : unsigned {
  kCInteger = 1,
  kFortranInteger = 2,
  kFloating = 4,
  kLogical = 8,
  kComplex = 16,
  kByte = 32,
  kMultiLanguage = 64,
  kPairGroup = 128,
};

// How an entry's Basic follows from its size.
enum class Num : uint8_t {
  kSigned,    // intN by size
  kUnsigned,  // uintN by size
  kReal,      // float or double by size
  kCplx,      // complex float or double by size
  kBoolean,   // C/C++ bool (1 byte)
  kLogic,     // Fortran LOGICAL: a 0/1 integer of its size
  kFixed,     // the entry's own Basic (pairs of C types)
  kPairOfReal,
  kPairOfInt,
};

struct TypeEntry {
  MPI_Datatype type;
  unsigned group;
  Num num;
  Basic fixed;
};

struct OpEntry {
  MPI_Op op;
  ReduceOp rop;
  unsigned groups;  // the groups MPI defines it for
};

constexpr unsigned kAnyGroup = ~0u;

bool int_of(int size, bool is_signed, Basic* b) {
  switch (size) {
    case 1:
      *b = is_signed ? Basic::kInt8 : Basic::kUint8;
      return true;
    case 2:
      *b = is_signed ? Basic::kInt16 : Basic::kUint16;
      return true;
    case 4:
      *b = is_signed ? Basic::kInt32 : Basic::kUint32;
      return true;
    case 8:
      *b = is_signed ? Basic::kInt64 : Basic::kUint64;
      return true;
    default:
      return false;
  }
}

// The Basic of an entry, from the MPI's size (and extent, for pairs).
bool basic_of(const TypeEntry& e, Basic* b) {
  int size = 0;
  if (PMPI_Type_size(e.type, &size) != MPI_SUCCESS || size <= 0) return false;
  switch (e.num) {
    case Num::kSigned:
    case Num::kLogic:
      return int_of(size, true, b);
    case Num::kUnsigned:
      return int_of(size, false, b);
    case Num::kReal:
      if (size != 4 && size != 8) return false;
      *b = size == 4 ? Basic::kFloat : Basic::kDouble;
      return true;
    case Num::kCplx:
      if (size != 8 && size != 16) return false;
      *b = size == 8 ? Basic::kCFloat : Basic::kCDouble;
      return true;
    case Num::kBoolean:
      *b = Basic::kBool;
      return size == 1;
    case Num::kPairOfReal:
      if (size != 8 && size != 16) return false;
      *b = size == 8 ? Basic::kTwoFloat : Basic::kTwoDouble;
      return true;
    case Num::kPairOfInt:
      *b = Basic::kTwoInt;
      return size == 8;
    case Num::kFixed: {
      // The C struct's layout must be the MPI's: value and index sizes add
      // up, and the extent is the struct's (long is 8 bytes, say).
      MPI_Aint lb = 0, extent = 0;
      if (PMPI_Type_get_extent(e.type, &lb, &extent) != MPI_SUCCESS) return false;
      *b = e.fixed;
      size_t data = 0;
      switch (e.fixed) {
        case Basic::kFloatInt:
          data = sizeof(float) + sizeof(int);
          break;
        case Basic::kDoubleInt:
          data = sizeof(double) + sizeof(int);
          break;
        case Basic::kLongInt:
          data = sizeof(long) + sizeof(int);
          break;
        case Basic::kTwoInt:
          data = 2 * sizeof(int);
          break;
        case Basic::kShortInt:
          data = sizeof(short) + sizeof(int);
          break;
        default:
          return false;
      }
      return lb == 0 && static_cast<size_t>(extent) == basic_size(e.fixed) &&
             static_cast<size_t>(size) == data;
    }
  }
  return false;
}

// The predefined operation `op`, with the type groups it is defined on.
const OpEntry* op_entry(MPI_Op op) {
  constexpr unsigned kMinMax = kCInteger | kFortranInteger | kFloating | kMultiLanguage;
  constexpr unsigned kSumProd = kMinMax | kComplex;
  constexpr unsigned kLogicalOps = kCInteger | kLogical;
  constexpr unsigned kBitwise = kCInteger | kFortranInteger | kByte | kMultiLanguage;
  static const OpEntry ops[] = {
      {MPI_SUM, ReduceOp::kSum, kSumProd},          {MPI_PROD, ReduceOp::kProd, kSumProd},
      {MPI_MIN, ReduceOp::kMin, kMinMax},           {MPI_MAX, ReduceOp::kMax, kMinMax},
      {MPI_LAND, ReduceOp::kLand, kLogicalOps},     {MPI_LOR, ReduceOp::kLor, kLogicalOps},
      {MPI_LXOR, ReduceOp::kLxor, kLogicalOps},     {MPI_BAND, ReduceOp::kBand, kBitwise},
      {MPI_BOR, ReduceOp::kBor, kBitwise},          {MPI_BXOR, ReduceOp::kBxor, kBitwise},
      {MPI_MINLOC, ReduceOp::kMinloc, kPairGroup},  {MPI_MAXLOC, ReduceOp::kMaxloc, kPairGroup},
      {MPI_REPLACE, ReduceOp::kReplace, kAnyGroup}, {MPI_NO_OP, ReduceOp::kNoOp, kAnyGroup},
  };
  for (const OpEntry& x : ops)
    if (x.op == op) return &x;
  return nullptr;
}

}  // namespace

bool predefined_op(MPI_Op op) {
  return op != MPI_OP_NULL && op_entry(op) != nullptr;
}

bool reduce_of(MPI_Op op, MPI_Datatype type, ReduceOp* rop, Basic* b) {
  if (op == MPI_OP_NULL || type == MPI_DATATYPE_NULL) return false;
  const OpEntry* o = op_entry(op);
  if (o == nullptr) return false;

  constexpr Basic kNone = Basic::kUint8;  // unused for entries sized by the MPI
  const TypeEntry types[] = {
      // C integer
      {MPI_SIGNED_CHAR, kCInteger, Num::kSigned, kNone},
      {MPI_UNSIGNED_CHAR, kCInteger, Num::kUnsigned, kNone},
      {MPI_SHORT, kCInteger, Num::kSigned, kNone},
      {MPI_UNSIGNED_SHORT, kCInteger, Num::kUnsigned, kNone},
      {MPI_INT, kCInteger, Num::kSigned, kNone},
      {MPI_UNSIGNED, kCInteger, Num::kUnsigned, kNone},
      {MPI_LONG, kCInteger, Num::kSigned, kNone},
      {MPI_UNSIGNED_LONG, kCInteger, Num::kUnsigned, kNone},
      {MPI_LONG_LONG_INT, kCInteger, Num::kSigned, kNone},
      {MPI_LONG_LONG, kCInteger, Num::kSigned, kNone},
      {MPI_UNSIGNED_LONG_LONG, kCInteger, Num::kUnsigned, kNone},
      {MPI_INT8_T, kCInteger, Num::kSigned, kNone},
      {MPI_INT16_T, kCInteger, Num::kSigned, kNone},
      {MPI_INT32_T, kCInteger, Num::kSigned, kNone},
      {MPI_INT64_T, kCInteger, Num::kSigned, kNone},
      {MPI_UINT8_T, kCInteger, Num::kUnsigned, kNone},
      {MPI_UINT16_T, kCInteger, Num::kUnsigned, kNone},
      {MPI_UINT32_T, kCInteger, Num::kUnsigned, kNone},
      {MPI_UINT64_T, kCInteger, Num::kUnsigned, kNone},
      // Multi-language
      {MPI_AINT, kMultiLanguage, Num::kSigned, kNone},
      {MPI_OFFSET, kMultiLanguage, Num::kSigned, kNone},
      {MPI_COUNT, kMultiLanguage, Num::kSigned, kNone},
      // Byte
      {MPI_BYTE, kByte, Num::kUnsigned, kNone},
      // Floating point
      {MPI_FLOAT, kFloating, Num::kReal, kNone},
      {MPI_DOUBLE, kFloating, Num::kReal, kNone},
      {MPI_REAL, kFloating, Num::kReal, kNone},
      {MPI_DOUBLE_PRECISION, kFloating, Num::kReal, kNone},
#ifdef MPI_REAL4
      {MPI_REAL4, kFloating, Num::kReal, kNone},
#endif
#ifdef MPI_REAL8
      {MPI_REAL8, kFloating, Num::kReal, kNone},
#endif
      // Fortran integer
      {MPI_INTEGER, kFortranInteger, Num::kSigned, kNone},
#ifdef MPI_INTEGER1
      {MPI_INTEGER1, kFortranInteger, Num::kSigned, kNone},
#endif
#ifdef MPI_INTEGER2
      {MPI_INTEGER2, kFortranInteger, Num::kSigned, kNone},
#endif
#ifdef MPI_INTEGER4
      {MPI_INTEGER4, kFortranInteger, Num::kSigned, kNone},
#endif
#ifdef MPI_INTEGER8
      {MPI_INTEGER8, kFortranInteger, Num::kSigned, kNone},
#endif
      // Logical
      {MPI_C_BOOL, kLogical, Num::kBoolean, kNone},
#ifdef MPI_CXX_BOOL
      {MPI_CXX_BOOL, kLogical, Num::kBoolean, kNone},
#endif
      {MPI_LOGICAL, kLogical, Num::kLogic, kNone},
#ifdef MPI_LOGICAL1
      {MPI_LOGICAL1, kLogical, Num::kLogic, kNone},
#endif
#ifdef MPI_LOGICAL2
      {MPI_LOGICAL2, kLogical, Num::kLogic, kNone},
#endif
#ifdef MPI_LOGICAL4
      {MPI_LOGICAL4, kLogical, Num::kLogic, kNone},
#endif
#ifdef MPI_LOGICAL8
      {MPI_LOGICAL8, kLogical, Num::kLogic, kNone},
#endif
      // Complex
      {MPI_C_COMPLEX, kComplex, Num::kCplx, kNone},
      {MPI_C_FLOAT_COMPLEX, kComplex, Num::kCplx, kNone},
      {MPI_C_DOUBLE_COMPLEX, kComplex, Num::kCplx, kNone},
#ifdef MPI_CXX_FLOAT_COMPLEX
      {MPI_CXX_FLOAT_COMPLEX, kComplex, Num::kCplx, kNone},
#endif
#ifdef MPI_CXX_DOUBLE_COMPLEX
      {MPI_CXX_DOUBLE_COMPLEX, kComplex, Num::kCplx, kNone},
#endif
      {MPI_COMPLEX, kComplex, Num::kCplx, kNone},
      {MPI_DOUBLE_COMPLEX, kComplex, Num::kCplx, kNone},
#ifdef MPI_COMPLEX8
      {MPI_COMPLEX8, kComplex, Num::kCplx, kNone},
#endif
#ifdef MPI_COMPLEX16
      {MPI_COMPLEX16, kComplex, Num::kCplx, kNone},
#endif
      // MINLOC / MAXLOC pairs
      {MPI_FLOAT_INT, kPairGroup, Num::kFixed, Basic::kFloatInt},
      {MPI_DOUBLE_INT, kPairGroup, Num::kFixed, Basic::kDoubleInt},
      {MPI_LONG_INT, kPairGroup, Num::kFixed, Basic::kLongInt},
      {MPI_2INT, kPairGroup, Num::kFixed, Basic::kTwoInt},
      {MPI_SHORT_INT, kPairGroup, Num::kFixed, Basic::kShortInt},
      {MPI_2REAL, kPairGroup, Num::kPairOfReal, kNone},
      {MPI_2DOUBLE_PRECISION, kPairGroup, Num::kPairOfReal, kNone},
      {MPI_2INTEGER, kPairGroup, Num::kPairOfInt, kNone},
  };
  for (const TypeEntry& e : types) {
    if (e.type != type) continue;
    if ((e.group & o->groups) == 0) return false;
    Basic basic;
    if (!basic_of(e, &basic) || !reduce_defined(o->rop, basic)) return false;
    *rop = o->rop;
    *b = basic;
    return true;
  }
  return false;
}

}  // namespace loom::coll
