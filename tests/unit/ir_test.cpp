#include <gtest/gtest.h>

#include <limits>

#include "type/ir.hpp"

namespace loom::type {
namespace {

TEST(Ir, DerivedFieldsOfStrided) {
  auto n = make_strided(4, 16, make_dense(8, 2), 100);
  EXPECT_EQ(n->size, 32);
  EXPECT_EQ(n->nblocks, 4);
  EXPECT_EQ(n->lo, 2);
  EXPECT_EQ(n->hi, 3 * 16 + 2 + 8);
  EXPECT_EQ(n->disp, 100);
  EXPECT_FALSE(n->overflow);
}

TEST(Ir, NegativeStrideBounds) {
  auto n = make_strided(3, -10, make_dense(4));
  EXPECT_EQ(n->lo, -20);
  EXPECT_EQ(n->hi, 4);
}

TEST(Ir, ListBoundsSkipEmptyItems) {
  auto n = make_list({make_dense(0, -1000), make_dense(4, 8), make_dense(2, -3)});
  EXPECT_EQ(n->size, 6);
  EXPECT_EQ(n->lo, -3);
  EXPECT_EQ(n->hi, 12);
}

TEST(Ir, OverflowIsFlaggedAndPropagates) {
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  auto n = make_strided(4, 1, make_dense(big));
  EXPECT_TRUE(n->overflow);
  auto outer = make_list({make_dense(1), n});
  EXPECT_TRUE(outer->overflow);
  auto far = make_strided(3, big + 1, make_dense(1));
  EXPECT_TRUE(far->overflow);
}

TEST(Ir, EqualityAndHashIncludeDisp) {
  auto a = make_strided(4, 16, make_dense(8));
  auto b = make_strided(4, 16, make_dense(8));
  auto c = shifted(b, 4);
  EXPECT_TRUE(equal(*a, *b));
  EXPECT_EQ(a->hash, b->hash);
  EXPECT_FALSE(equal(*a, *c));
  EXPECT_NE(a->hash, c->hash);
  EXPECT_TRUE(equal_shape(*a, *c));
}

TEST(Ir, TextForm) {
  auto n = make_list({make_dense(8), make_strided(3, 32, make_dense(8), 36)}, 4);
  EXPECT_EQ(to_string(n), "L[D8,S(3,32){D8}@36]@4");
  EXPECT_EQ(to_string(nullptr), "empty");
}

}  // namespace
}  // namespace loom::type
