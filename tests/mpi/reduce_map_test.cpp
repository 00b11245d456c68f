// reduce_of and host_reduce against the MPI's own operations: for every
// predefined (operation, datatype) pair that reduce_of accepts, host_reduce
// over three seeded inputs equals PMPI_Reduce_local's left fold byte for
// byte. Open MPI runs this with its op/avx component off
// (OMPI_MCA_op=^avx, tests/mpi/CMakeLists.txt): in Open MPI 4.1 that
// component saturates 8- and 16-bit integer SUMs (open-mpi/ompi#8045) and
// returns the other operand of float MIN/MAX on ties and NaNs, but only in
// its vector body, so its results depend on the element's position.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "coll/reduce_map.hpp"
#include "coll/reduce_op.hpp"

namespace loom::coll {
namespace {

struct Named {
  MPI_Datatype type;
  const char* name;
};
#define NAMED(t) \
  Named {        \
    t, #t        \
  }

std::vector<Named> all_types() {
  std::vector<Named> v = {
      NAMED(MPI_CHAR),
      NAMED(MPI_SIGNED_CHAR),
      NAMED(MPI_UNSIGNED_CHAR),
      NAMED(MPI_BYTE),
      NAMED(MPI_WCHAR),
      NAMED(MPI_SHORT),
      NAMED(MPI_UNSIGNED_SHORT),
      NAMED(MPI_INT),
      NAMED(MPI_UNSIGNED),
      NAMED(MPI_LONG),
      NAMED(MPI_UNSIGNED_LONG),
      NAMED(MPI_LONG_LONG_INT),
      NAMED(MPI_LONG_LONG),
      NAMED(MPI_UNSIGNED_LONG_LONG),
      NAMED(MPI_INT8_T),
      NAMED(MPI_INT16_T),
      NAMED(MPI_INT32_T),
      NAMED(MPI_INT64_T),
      NAMED(MPI_UINT8_T),
      NAMED(MPI_UINT16_T),
      NAMED(MPI_UINT32_T),
      NAMED(MPI_UINT64_T),
      NAMED(MPI_AINT),
      NAMED(MPI_OFFSET),
      NAMED(MPI_COUNT),
      NAMED(MPI_FLOAT),
      NAMED(MPI_DOUBLE),
      NAMED(MPI_LONG_DOUBLE),
      NAMED(MPI_C_BOOL),
      NAMED(MPI_C_COMPLEX),
      NAMED(MPI_C_FLOAT_COMPLEX),
      NAMED(MPI_C_DOUBLE_COMPLEX),
      NAMED(MPI_C_LONG_DOUBLE_COMPLEX),
      NAMED(MPI_PACKED),
      NAMED(MPI_INTEGER),
      NAMED(MPI_REAL),
      NAMED(MPI_DOUBLE_PRECISION),
      NAMED(MPI_LOGICAL),
      NAMED(MPI_COMPLEX),
      NAMED(MPI_DOUBLE_COMPLEX),
      NAMED(MPI_FLOAT_INT),
      NAMED(MPI_DOUBLE_INT),
      NAMED(MPI_LONG_INT),
      NAMED(MPI_2INT),
      NAMED(MPI_SHORT_INT),
      NAMED(MPI_LONG_DOUBLE_INT),
      NAMED(MPI_2REAL),
      NAMED(MPI_2DOUBLE_PRECISION),
      NAMED(MPI_2INTEGER),
  };
#ifdef MPI_CXX_BOOL
  v.push_back(NAMED(MPI_CXX_BOOL));
#endif
#ifdef MPI_CXX_FLOAT_COMPLEX
  v.push_back(NAMED(MPI_CXX_FLOAT_COMPLEX));
#endif
#ifdef MPI_CXX_DOUBLE_COMPLEX
  v.push_back(NAMED(MPI_CXX_DOUBLE_COMPLEX));
#endif
#ifdef MPI_INTEGER1
  v.push_back(NAMED(MPI_INTEGER1));
#endif
#ifdef MPI_INTEGER2
  v.push_back(NAMED(MPI_INTEGER2));
#endif
#ifdef MPI_INTEGER4
  v.push_back(NAMED(MPI_INTEGER4));
#endif
#ifdef MPI_INTEGER8
  v.push_back(NAMED(MPI_INTEGER8));
#endif
#ifdef MPI_REAL4
  v.push_back(NAMED(MPI_REAL4));
#endif
#ifdef MPI_REAL8
  v.push_back(NAMED(MPI_REAL8));
#endif
#ifdef MPI_REAL16
  v.push_back(NAMED(MPI_REAL16));
#endif
#ifdef MPI_COMPLEX8
  v.push_back(NAMED(MPI_COMPLEX8));
#endif
#ifdef MPI_COMPLEX16
  v.push_back(NAMED(MPI_COMPLEX16));
#endif
#ifdef MPI_LOGICAL1
  v.push_back(NAMED(MPI_LOGICAL1));
#endif
#ifdef MPI_LOGICAL2
  v.push_back(NAMED(MPI_LOGICAL2));
#endif
#ifdef MPI_LOGICAL4
  v.push_back(NAMED(MPI_LOGICAL4));
#endif
#ifdef MPI_LOGICAL8
  v.push_back(NAMED(MPI_LOGICAL8));
#endif
  std::vector<Named> live;
  for (const Named& n : v)
    if (n.type != MPI_DATATYPE_NULL) live.push_back(n);
  return live;
}

struct NamedOp {
  MPI_Op op;
  const char* name;
};
const NamedOp kOps[] = {
    {MPI_SUM, "MPI_SUM"},         {MPI_PROD, "MPI_PROD"},     {MPI_MIN, "MPI_MIN"},
    {MPI_MAX, "MPI_MAX"},         {MPI_LAND, "MPI_LAND"},     {MPI_LOR, "MPI_LOR"},
    {MPI_LXOR, "MPI_LXOR"},       {MPI_BAND, "MPI_BAND"},     {MPI_BOR, "MPI_BOR"},
    {MPI_BXOR, "MPI_BXOR"},       {MPI_MINLOC, "MPI_MINLOC"}, {MPI_MAXLOC, "MPI_MAXLOC"},
    {MPI_REPLACE, "MPI_REPLACE"}, {MPI_NO_OP, "MPI_NO_OP"},
};

template <class T>
void put(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// A float for `op`: SUM and PROD get finite values of full mantissas (so
// rounding shows the fold's order; three factors cannot overflow); the
// selecting operations also get signed zeros, infinities, NaNs and ties.
template <class R>
R pick_real(ReduceOp op, std::mt19937_64& rng) {
  const R frac = std::ldexp(R(static_cast<int64_t>(rng() % (1u << 24)) - (1 << 23)), -21);
  if (op == ReduceOp::kSum || op == ReduceOp::kProd) return frac;
  switch (rng() % 8) {
    case 0:
      return R(0);
    case 1:
      return -R(0);
    case 2:
      return std::numeric_limits<R>::infinity();
    case 3:
      return std::numeric_limits<R>::quiet_NaN();
    case 4:
      return -std::numeric_limits<R>::quiet_NaN();
    case 5:
      return R(static_cast<int>(rng() % 3) - 1);
    default:
      return frac;
  }
}

// One element of Basic b for `op`, padding bytes random too.
void fill_value(ReduceOp op, Basic b, bool logical, std::mt19937_64& rng, unsigned char* p) {
  const size_t size = basic_size(b);
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<unsigned char>(rng());
  const auto small_int = [&]() { return static_cast<int32_t>(rng() % 3) - 1; };
  switch (b) {
    case Basic::kBool:
      p[0] = static_cast<unsigned char>(rng() % 2);
      return;
    case Basic::kFloat:
      put(p, pick_real<float>(op, rng));
      return;
    case Basic::kDouble:
      put(p, pick_real<double>(op, rng));
      return;
    case Basic::kCFloat:
      put(p, pick_real<float>(op, rng));
      put(p + 4, pick_real<float>(op, rng));
      return;
    case Basic::kCDouble:
      put(p, pick_real<double>(op, rng));
      put(p + 8, pick_real<double>(op, rng));
      return;
    case Basic::kFloatInt:
      put(p, pick_real<float>(op, rng));
      put(p + 4, small_int() + 1);
      return;
    case Basic::kDoubleInt:
      put(p, pick_real<double>(op, rng));
      put(p + 8, small_int() + 1);
      return;
    case Basic::kLongInt:
      put(p, static_cast<int64_t>(small_int()));
      put(p + 8, small_int() + 1);
      return;
    case Basic::kTwoInt:
      put(p, small_int());
      put(p + 4, small_int() + 1);
      return;
    case Basic::kShortInt:
      put(p, static_cast<int16_t>(small_int()));
      put(p + 4, small_int() + 1);
      return;
    case Basic::kTwoFloat:
      put(p, pick_real<float>(op, rng));
      put(p + 4, static_cast<float>(rng() % 3));
      return;
    case Basic::kTwoDouble:
      put(p, pick_real<double>(op, rng));
      put(p + 8, static_cast<double>(rng() % 3));
      return;
    default:
      break;
  }
  // Integers: Fortran LOGICAL 0 or 1; else random bits or, half the time,
  // -1, 0 or 1 (ties for MIN/MAX, zeros for the logical operations).
  if (logical) {
    std::memset(p, 0, size);
    p[0] = static_cast<unsigned char>(rng() % 2);
  } else if (rng() % 2) {
    const int64_t v = small_int();
    std::memcpy(p, &v, size);
  }
}

// Fortran LOGICAL values must be .FALSE. or .TRUE. (0 or 1 with gfortran).
bool is_fortran_logical(MPI_Datatype t) {
  if (t == MPI_LOGICAL) return true;
#ifdef MPI_LOGICAL1
  if (t == MPI_LOGICAL1) return true;
#endif
#ifdef MPI_LOGICAL2
  if (t == MPI_LOGICAL2) return true;
#endif
#ifdef MPI_LOGICAL4
  if (t == MPI_LOGICAL4) return true;
#endif
#ifdef MPI_LOGICAL8
  if (t == MPI_LOGICAL8) return true;
#endif
  return false;
}

// Whether the MPI's MIN orders integer type t (Basic b) with the wrong
// signedness: known MPI bugs (MPICH 4.0.2: every unsigned type,
// pmodels/mpich#6083; Open MPI 4.1.2-4.1.4: MPI_UNSIGNED_LONG,
// open-mpi/ompi#10525, and MPI_OFFSET compared unsigned). Loom follows the
// standard; such types get MIN/MAX inputs below 2^(bits-1), where both
// orders agree.
bool wrong_signedness(MPI_Datatype t, Basic b) {
  const size_t es = basic_size(b);
  if (static_cast<int>(b) > static_cast<int>(Basic::kUint64)) return false;  // not an integer
  // x = {top bit, 1}, y = {1, top bit}.
  unsigned char x[16] = {}, y[16] = {};
  x[es - 1] = 0x80;
  x[es] = 1;
  y[0] = 1;
  y[2 * es - 1] = 0x80;
  unsigned char loom[16];
  const void* in[] = {x, y};
  if (!host_reduce(ReduceOp::kMin, b, in, 2, loom, 2).is_ok()) return false;
  if (PMPI_Reduce_local(x, y, 2, t, MPI_MIN) != MPI_SUCCESS) return false;
  return std::memcmp(loom, y, 2 * es) != 0;
}

// PMPI_Reduce_local's left fold: acc = in[0]; acc = acc op in[k].
std::vector<unsigned char> mpi_fold(const std::vector<std::vector<unsigned char>>& in, int count,
                                    MPI_Datatype t, MPI_Op op, int* rc) {
  std::vector<unsigned char> acc = in[0];
  for (size_t k = 1; k < in.size(); ++k) {
    std::vector<unsigned char> next = in[k];
    *rc = PMPI_Reduce_local(acc.data(), next.data(), count, t, op);
    if (*rc != MPI_SUCCESS) return {};
    acc = next;
  }
  return acc;
}

class ReduceMap : public ::testing::Test {
 protected:
  void SetUp() override {  // an MPI that refuses a pair reports it here
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    PMPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  }
  void TearDown() override {
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    PMPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
  }
};

TEST_F(ReduceMap, HostReduceEqualsTheMpisOwnReduction) {
  constexpr int kCount = 1000;
  int compared = 0;
  for (const Named& t : all_types())
    for (const NamedOp& o : kOps) {
      ReduceOp rop;
      Basic b;
      if (!reduce_of(o.op, t.type, &rop, &b)) continue;
      const std::string what = std::string(o.name) + " " + t.name;
      MPI_Aint lb = 0, extent = 0;
      ASSERT_EQ(PMPI_Type_get_extent(t.type, &lb, &extent), MPI_SUCCESS);
      ASSERT_EQ(static_cast<size_t>(extent), basic_size(b)) << what;
      if (rop == ReduceOp::kReplace || rop == ReduceOp::kNoOp) continue;  // accumulate only

      const bool logical = is_fortran_logical(t.type);
      const bool low_half =
          (rop == ReduceOp::kMin || rop == ReduceOp::kMax) && wrong_signedness(t.type, b);
      if (low_half)
        std::printf(
            "[ReduceMap] %s: the MPI orders it with the wrong signedness (a known MPI "
            "bug); compared on values below 2^(bits-1)\n",
            what.c_str());
      std::mt19937_64 rng(std::hash<std::string>{}(what));
      const size_t es = basic_size(b);
      std::vector<std::vector<unsigned char>> in(3, std::vector<unsigned char>(kCount * es));
      for (auto& v : in)
        for (int i = 0; i < kCount; ++i) {
          fill_value(rop, b, logical, rng, v.data() + i * es);
          if (low_half) v[i * es + es - 1] &= 0x7F;
        }

      int rc = MPI_SUCCESS;
      const std::vector<unsigned char> want = mpi_fold(in, kCount, t.type, o.op, &rc);
      ASSERT_EQ(rc, MPI_SUCCESS) << what << ": the MPI refuses a pair reduce_of accepts";
      // (Open MPI with op/avx on gives position-dependent results: 8/16-bit
      // SUMs saturate, float MIN/MAX ties differ; ctest sets OMPI_MCA_op=^avx.)
      std::vector<unsigned char> got = in[2];  // padding as the MPI leaves it
      const void* ptrs[] = {in[0].data(), in[1].data(), in[2].data()};
      const Status s = host_reduce(rop, b, ptrs, 3, got.data(), kCount);
      ASSERT_TRUE(s.is_ok()) << what << ": " << s.message();
      for (int i = 0; i < kCount; ++i)
        ASSERT_EQ(std::memcmp(got.data() + i * es, want.data() + i * es, es), 0)
            << what << ": element " << i << " differs from PMPI_Reduce_local's";
      ++compared;
    }
  EXPECT_GE(compared, 200);
  std::printf("[ReduceMap] %d (op, type) pairs equal the MPI's bit for bit\n", compared);
}

// C complex PROD with infinities and NaNs: both MPIs multiply with C's
// operator (C99 Annex G recovers infinities), and so does host_reduce.
TEST_F(ReduceMap, ComplexProductSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, inf, -inf, nan, 1e30f};
  std::vector<std::complex<float>> x, y;
  for (float a : vals)
    for (float b : vals)
      for (float c : vals)
        for (float d : vals) {
          x.emplace_back(a, b);
          y.emplace_back(c, d);
        }
  const int n = static_cast<int>(x.size());
  for (MPI_Datatype t : {MPI_C_FLOAT_COMPLEX, MPI_C_COMPLEX}) {
    ReduceOp rop;
    Basic b;
    ASSERT_TRUE(reduce_of(MPI_PROD, t, &rop, &b));
    ASSERT_EQ(b, Basic::kCFloat);
    std::vector<std::complex<float>> want = y, got(x.size());
    ASSERT_EQ(PMPI_Reduce_local(x.data(), want.data(), n, t, MPI_PROD), MPI_SUCCESS);
    const void* in[] = {x.data(), y.data()};
    ASSERT_TRUE(host_reduce(rop, b, in, 2, got.data(), x.size()).is_ok());
    for (int i = 0; i < n; ++i) {
      const auto same = [](float u, float v) {
        return std::memcmp(&u, &v, 4) == 0 || (std::isnan(u) && std::isnan(v));
      };
      ASSERT_TRUE(same(got[i].real(), want[i].real()) && same(got[i].imag(), want[i].imag()))
          << x[i] << " * " << y[i] << ": Loom " << got[i] << ", the MPI " << want[i];
    }
  }
}

TEST_F(ReduceMap, Mapping) {
  struct Want {
    MPI_Op op;
    MPI_Datatype type;
    bool ok;
    ReduceOp rop;
    Basic b;
    const char* what;
  };
  const Want cases[] = {
      {MPI_SUM, MPI_INT, true, ReduceOp::kSum, Basic::kInt32, "SUM INT"},
      {MPI_SUM, MPI_LONG, true, ReduceOp::kSum, Basic::kInt64, "SUM LONG"},
      {MPI_MAX, MPI_UNSIGNED_LONG, true, ReduceOp::kMax, Basic::kUint64, "MAX UNSIGNED_LONG"},
      {MPI_MIN, MPI_SIGNED_CHAR, true, ReduceOp::kMin, Basic::kInt8, "MIN SIGNED_CHAR"},
      {MPI_MIN, MPI_UNSIGNED_CHAR, true, ReduceOp::kMin, Basic::kUint8, "MIN UNSIGNED_CHAR"},
      {MPI_BAND, MPI_BYTE, true, ReduceOp::kBand, Basic::kUint8, "BAND BYTE"},
      {MPI_SUM, MPI_BYTE, false, ReduceOp::kSum, Basic::kUint8, "SUM BYTE"},
      {MPI_SUM, MPI_CHAR, false, ReduceOp::kSum, Basic::kInt8, "SUM CHAR"},
      {MPI_MAX, MPI_CHAR, false, ReduceOp::kMax, Basic::kInt8, "MAX CHAR"},
      {MPI_BOR, MPI_WCHAR, false, ReduceOp::kBor, Basic::kInt32, "BOR WCHAR"},
      {MPI_LAND, MPI_FLOAT, false, ReduceOp::kLand, Basic::kFloat, "LAND FLOAT"},
      {MPI_LAND, MPI_INTEGER, false, ReduceOp::kLand, Basic::kInt32, "LAND INTEGER"},
      {MPI_BAND, MPI_INTEGER, true, ReduceOp::kBand, Basic::kInt32, "BAND INTEGER"},
      {MPI_MIN, MPI_C_FLOAT_COMPLEX, false, ReduceOp::kMin, Basic::kCFloat, "MIN C_COMPLEX"},
      {MPI_PROD, MPI_C_DOUBLE_COMPLEX, true, ReduceOp::kProd, Basic::kCDouble, "PROD C_DCOMPLEX"},
      {MPI_PROD, MPI_DOUBLE_COMPLEX, true, ReduceOp::kProd, Basic::kCDouble, "PROD DCOMPLEX"},
      {MPI_SUM, MPI_LONG_DOUBLE, false, ReduceOp::kSum, Basic::kDouble, "SUM LONG_DOUBLE"},
      {MPI_MINLOC, MPI_INT, false, ReduceOp::kMinloc, Basic::kInt32, "MINLOC INT"},
      {MPI_SUM, MPI_2INT, false, ReduceOp::kSum, Basic::kTwoInt, "SUM 2INT"},
      {MPI_MINLOC, MPI_DOUBLE_INT, true, ReduceOp::kMinloc, Basic::kDoubleInt, "MINLOC DOUBLE_INT"},
      {MPI_MAXLOC, MPI_LONG_INT, true, ReduceOp::kMaxloc, Basic::kLongInt, "MAXLOC LONG_INT"},
      {MPI_MAXLOC, MPI_SHORT_INT, true, ReduceOp::kMaxloc, Basic::kShortInt, "MAXLOC SHORT_INT"},
      {MPI_MINLOC, MPI_LONG_DOUBLE_INT, false, ReduceOp::kMinloc, Basic::kDoubleInt, "LD_INT"},
      {MPI_MINLOC, MPI_2REAL, true, ReduceOp::kMinloc, Basic::kTwoFloat, "MINLOC 2REAL"},
      {MPI_MINLOC, MPI_2DOUBLE_PRECISION, true, ReduceOp::kMinloc, Basic::kTwoDouble, "2DP"},
      {MPI_MAXLOC, MPI_2INTEGER, true, ReduceOp::kMaxloc, Basic::kTwoInt, "MAXLOC 2INTEGER"},
      {MPI_LAND, MPI_LOGICAL, true, ReduceOp::kLand, Basic::kInt32, "LAND LOGICAL"},
      {MPI_SUM, MPI_LOGICAL, false, ReduceOp::kSum, Basic::kInt32, "SUM LOGICAL"},
      {MPI_LOR, MPI_C_BOOL, true, ReduceOp::kLor, Basic::kBool, "LOR C_BOOL"},
      {MPI_MAX, MPI_C_BOOL, false, ReduceOp::kMax, Basic::kBool, "MAX C_BOOL"},
      {MPI_SUM, MPI_AINT, true, ReduceOp::kSum, Basic::kInt64, "SUM AINT"},
      {MPI_LAND, MPI_AINT, false, ReduceOp::kLand, Basic::kInt64, "LAND AINT"},
      {MPI_BXOR, MPI_COUNT, true, ReduceOp::kBxor, Basic::kInt64, "BXOR COUNT"},
      {MPI_REPLACE, MPI_DOUBLE_INT, true, ReduceOp::kReplace, Basic::kDoubleInt, "REPLACE D_INT"},
      {MPI_NO_OP, MPI_BYTE, true, ReduceOp::kNoOp, Basic::kUint8, "NO_OP BYTE"},
      {MPI_REPLACE, MPI_CHAR, false, ReduceOp::kReplace, Basic::kInt8, "REPLACE CHAR"},
      {MPI_SUM, MPI_DATATYPE_NULL, false, ReduceOp::kSum, Basic::kInt8, "SUM NULL"},
      {MPI_OP_NULL, MPI_INT, false, ReduceOp::kSum, Basic::kInt32, "OP_NULL INT"},
  };
  for (const Want& w : cases) {
    ReduceOp rop = ReduceOp::kNoOp;
    Basic b = Basic::kTwoDouble;
    EXPECT_EQ(reduce_of(w.op, w.type, &rop, &b), w.ok) << w.what;
    if (w.ok) {
      EXPECT_EQ(rop, w.rop) << w.what;
      EXPECT_EQ(b, w.b) << w.what;
    }
  }
  // User operations and derived types: the MPI's business.
  MPI_Op user;
  ASSERT_EQ(PMPI_Op_create([](void*, void*, int*, MPI_Datatype*) {}, 1, &user), MPI_SUCCESS);
  ReduceOp rop;
  Basic b;
  EXPECT_FALSE(reduce_of(user, MPI_INT, &rop, &b));
  PMPI_Op_free(&user);
  MPI_Datatype two;
  ASSERT_EQ(PMPI_Type_contiguous(2, MPI_INT, &two), MPI_SUCCESS);
  ASSERT_EQ(PMPI_Type_commit(&two), MPI_SUCCESS);
  EXPECT_FALSE(reduce_of(MPI_SUM, two, &rop, &b));
  PMPI_Type_free(&two);
}

}  // namespace
}  // namespace loom::coll
