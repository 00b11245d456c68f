// Equivalent descriptions of one layout get the identical canonical form.
#include <gtest/gtest.h>

#include <vector>

#include "loom/loom.h"
#include "mpi/runtime.hpp"

namespace loom::test {
namespace {

// Commits each type, checks all forms equal (structure, hash, and the very
// same interned node), frees them.
void expect_same_form(std::vector<MPI_Datatype> types) {
  std::vector<type::NodePtr> forms;
  for (auto& t : types) {
    MPI_Type_commit(&t);
    loom_type_commit(t);
    auto e = runtime()->types.lookup(t);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    forms.push_back(e.value()->info.form);
  }
  ASSERT_NE(forms[0], nullptr);
  for (size_t i = 1; i < forms.size(); ++i) {
    ASSERT_NE(forms[i], nullptr);
    EXPECT_TRUE(type::equal(*forms[0], *forms[i]))
        << "spelling " << i << ": " << type::to_string(forms[i]) << " vs "
        << type::to_string(forms[0]);
    EXPECT_EQ(forms[0]->hash, forms[i]->hash);
    EXPECT_EQ(forms[0].get(), forms[i].get()) << "equal forms are interned";
  }
  for (auto& t : types) {
    loom_type_free(t);
    MPI_Type_free(&t);
  }
}

TEST(Equivalence, SubBlock2D) {
  const int R = 64, B = 5, S = 12;  // rows, block, stride (floats)
  MPI_Datatype vec, hvec, contig, sub, vv, inner, cv, half, halfr, tmp;
  MPI_Type_vector(R, B, S, MPI_FLOAT, &vec);
  MPI_Type_contiguous(B, MPI_FLOAT, &contig);
  MPI_Type_create_hvector(R, 1, S * 4, contig, &hvec);
  int sizes[2] = {R, S}, subs[2] = {R, B}, starts[2] = {0, 0};
  MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_FLOAT, &sub);
  MPI_Type_vector(1, B, 1, MPI_FLOAT, &inner);  // a count-1 vector
  MPI_Type_vector(R, 1, 1, inner, &tmp);        // stride in units of inner's extent (B floats)
  MPI_Type_free(&tmp);
  MPI_Datatype inner_r;
  MPI_Type_create_resized(inner, 0, S * 4, &inner_r);
  MPI_Type_vector(R, 1, 1, inner_r, &vv);  // vector of count-1 vectors
  MPI_Type_vector(R / 2, B, S, MPI_FLOAT, &half);
  MPI_Type_create_resized(half, 0, (R / 2) * S * 4, &halfr);
  MPI_Type_contiguous(2, halfr, &cv);  // contiguous of vector
  MPI_Type_free(&contig);
  MPI_Type_free(&inner);
  MPI_Type_free(&inner_r);
  MPI_Type_free(&half);
  MPI_Type_free(&halfr);
  expect_same_form({vec, hvec, sub, vv, cv});
}

TEST(Equivalence, Box3D) {
  const int Z = 6, Y = 7, X = 9, z = 3, y = 4, x = 5, sz = 1, sy = 2, sx = 3;
  MPI_Datatype sub, row, plane, box, nested, planer, vplane, boxv, vbox;
  int sizes[3] = {Z, Y, X}, subs[3] = {z, y, x}, starts[3] = {sz, sy, sx};
  MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_DOUBLE, &sub);
  // Nested hvectors, moved to the start by a one-block hindexed.
  MPI_Type_contiguous(x, MPI_DOUBLE, &row);
  MPI_Type_create_hvector(y, 1, X * 8, row, &plane);
  MPI_Type_create_hvector(z, 1, Y * X * 8, plane, &box);
  MPI_Aint off = ((static_cast<MPI_Aint>(sz) * Y + sy) * X + sx) * 8;
  MPI_Type_create_hindexed_block(1, 1, &off, box, &nested);
  // Vector of hvector: planes resized to the grid's plane, then a vector of them.
  MPI_Type_create_hvector(y, x, X * 8, MPI_DOUBLE, &vplane);
  MPI_Type_create_resized(vplane, 0, Y * X * 8, &planer);
  MPI_Type_vector(z, 1, 1, planer, &boxv);
  MPI_Type_create_hindexed_block(1, 1, &off, boxv, &vbox);
  for (MPI_Datatype* t : {&row, &plane, &box, &vplane, &planer, &boxv}) MPI_Type_free(t);
  expect_same_form({sub, nested, vbox});
}

TEST(Equivalence, StructWithOneFieldIsItsBasicType) {
  MPI_Datatype st, dup, st3, contig3;
  int bl = 1, bl3 = 3;
  MPI_Aint dp = 0;
  MPI_Datatype ty = MPI_DOUBLE;
  MPI_Type_create_struct(1, &bl, &dp, &ty, &st);
  MPI_Type_dup(MPI_DOUBLE, &dup);
  expect_same_form({st, dup});
  MPI_Type_create_struct(1, &bl3, &dp, &ty, &st3);
  MPI_Type_contiguous(3, MPI_DOUBLE, &contig3);
  expect_same_form({st3, contig3});
}

TEST(Equivalence, ResizedTypesThatTile) {
  MPI_Datatype r, c1, c2, v, idx;
  MPI_Type_create_resized(MPI_INT, 0, 4, &r);
  MPI_Type_contiguous(8, r, &c1);
  MPI_Type_contiguous(8, MPI_INT, &c2);
  MPI_Type_vector(2, 4, 4, MPI_INT, &v);
  int bl[2] = {3, 5}, dp[2] = {0, 3};
  MPI_Type_indexed(2, bl, dp, MPI_INT, &idx);
  MPI_Type_free(&r);
  expect_same_form({c1, c2, v, idx});
}

TEST(Equivalence, IndexedWithEqualSpacingIsAVector) {
  MPI_Datatype idx, ib, hib, vec;
  int bl[4] = {2, 2, 2, 2}, dp[4] = {0, 5, 10, 15};
  MPI_Aint hdp[4] = {0, 20, 40, 60};
  MPI_Type_indexed(4, bl, dp, MPI_INT, &idx);
  MPI_Type_create_indexed_block(4, 2, dp, MPI_INT, &ib);
  MPI_Type_create_hindexed_block(4, 2, hdp, MPI_INT, &hib);
  MPI_Type_vector(4, 2, 5, MPI_INT, &vec);
  expect_same_form({idx, ib, hib, vec});
}

TEST(Equivalence, DarrayOnOneProcessIsTheWholeArray) {
  MPI_Datatype da, c;
  int gs[2] = {4, 6}, ds[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
      dg[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG}, ps[2] = {1, 1};
  MPI_Type_create_darray(1, 0, 2, gs, ds, dg, ps, MPI_ORDER_C, MPI_FLOAT, &da);
  MPI_Type_contiguous(24, MPI_FLOAT, &c);
  expect_same_form({da, c});
}

TEST(Equivalence, DifferentLayoutsDiffer) {
  MPI_Datatype a, b;
  MPI_Type_vector(4, 1, 2, MPI_INT, &a);
  MPI_Type_vector(4, 1, 3, MPI_INT, &b);
  MPI_Type_commit(&a);
  MPI_Type_commit(&b);
  loom_type_commit(a);
  loom_type_commit(b);
  auto ea = runtime()->types.lookup(a), eb = runtime()->types.lookup(b);
  ASSERT_TRUE(ea.is_ok() && eb.is_ok());
  EXPECT_FALSE(type::equal(*ea.value()->info.form, *eb.value()->info.form));
  EXPECT_NE(ea.value()->info.hash(), eb.value()->info.hash());
  for (MPI_Datatype* t : {&a, &b}) {
    loom_type_free(*t);
    MPI_Type_free(t);
  }
}

}  // namespace
}  // namespace loom::test
