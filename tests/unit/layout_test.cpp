#include <gtest/gtest.h>

#include "pack/layout.hpp"
#include "random_ir.hpp"
#include "type/canonical.hpp"

namespace loom::pack {
namespace {

using namespace loom::type;

Layout layout_of(const NodePtr& n) {
  auto l = make_layout(canonicalize(n));
  EXPECT_TRUE(l.is_ok()) << l.status().message();
  return l.value();
}

TEST(Layout, Kinds) {
  EXPECT_EQ(layout_of(make_dense(0)).kind, LayoutKind::kEmpty);
  Layout c = layout_of(make_strided(4, 8, make_dense(8), 16));
  EXPECT_EQ(c.kind, LayoutKind::kContiguous);
  EXPECT_EQ(c.base, 16);
  EXPECT_EQ(c.total, 32);
  Layout s = layout_of(make_strided(5, 100, make_strided(3, 10, make_dense(2))));
  EXPECT_EQ(s.kind, LayoutKind::kStrided);
  ASSERT_EQ(s.dims.size(), 2u);
  EXPECT_EQ(s.dims[0].count, 5);
  EXPECT_EQ(s.dims[1].stride, 10);
  EXPECT_EQ(s.block_len, 2);
  Layout b = layout_of(make_list({make_dense(4), make_dense(8, 20)}));
  EXPECT_EQ(b.kind, LayoutKind::kBlocks);
  EXPECT_EQ(b.blocks.size(), 2u);
  EXPECT_EQ(b.tile_bytes, 12);
  EXPECT_EQ(b.prefix, (std::vector<int64_t>{0, 4, 12}));
}

TEST(Layout, DeepNestingBecomesBlockTile) {
  NodePtr n = make_dense(1);
  for (int d = 0; d < 10; ++d) n = make_strided(2, int64_t{3} << (2 * d), n);  // never tiles
  Layout l = layout_of(n);
  EXPECT_EQ(l.kind, LayoutKind::kBlocks);
  EXPECT_LE(l.dims.size(), static_cast<size_t>(kMaxDims));
  EXPECT_EQ(l.total, 1024);
}

TEST(Layout, OverflowIsAnError) {
  auto n = make_strided(int64_t{1} << 40, 1 << 30, make_dense(1 << 30));
  auto l = make_layout(n);
  EXPECT_FALSE(l.is_ok());
  EXPECT_EQ(l.status().code(), Err::kOverflow);
}

// The shared index math maps every packed byte to the same offset as the
// naive walk of the tree, for random trees repeated 1..3 times.
TEST(Layout, IndexMathMatchesNaiveWalk) {
  for (uint64_t seed = 1; seed <= 1500; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    NodePtr ir = test::random_tree(rng, 4);
    NodePtr form = canonicalize(ir);
    int64_t count = 1 + static_cast<int64_t>(seed % 3);
    int64_t extent = ir->size ? ir->hi - ir->lo + static_cast<int64_t>(seed % 5) : 1;
    NodePtr all = repeat(form, count, extent);
    auto expect = test::naive_bytes(repeat(ir, count, extent));
    auto l = make_layout(all);
    ASSERT_TRUE(l.is_ok());
    ASSERT_EQ(l->total, static_cast<int64_t>(expect.size()));
    LayoutView v = l->view();
    for (int64_t p = 0; p < l->total; ++p)
      ASSERT_EQ(packed_to_offset(v, p), expect[p]) << "byte " << p << " of " << to_string(all);
  }
}

// The per-call view of count elements, made from the one-element layout,
// maps every byte like the naive walk of the repeated tree.
TEST(Layout, RepeatViewMatchesNaiveWalk) {
  int views = 0;
  for (uint64_t seed = 1; seed <= 1500; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    NodePtr ir = test::random_tree(rng, 4);
    auto one = make_layout(canonicalize(ir));
    ASSERT_TRUE(one.is_ok());
    int64_t count = static_cast<int64_t>(seed % 5);
    int64_t extent = ir->size ? ir->hi - ir->lo + static_cast<int64_t>(seed % 3) - 1 : 1;
    auto v = repeat_view(*one, count, extent);
    if (!v) {
      ASSERT_EQ(v.status().code(), Err::kUnsupported);
      continue;
    }
    ++views;
    auto expect = test::naive_bytes(repeat(ir, count, extent));
    ASSERT_EQ(v->total, static_cast<int64_t>(expect.size()));
    for (int64_t p = 0; p < v->total; ++p) ASSERT_EQ(packed_to_offset(*v, p), expect[p]) << p;
  }
  EXPECT_GT(views, 1400);
}

TEST(Layout, RepeatViewFoldsTilingElements) {
  auto one = make_layout(canonicalize(make_strided(4, 16, make_dense(8))));
  auto v = repeat_view(*one, 10, 64);  // the next element continues the stride
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->ndims, 1);
  EXPECT_EQ(v->dims[0].count, 40);
  auto c = make_layout(make_dense(12));
  auto w = repeat_view(*c, 5, 12);
  EXPECT_EQ(w->kind, LayoutKind::kContiguous);
  EXPECT_EQ(w->total, 60);
}

TEST(Layout, FindBlockSkipsEmptyAndPicksLast) {
  int64_t prefix[] = {0, 4, 4, 10, 12};
  EXPECT_EQ(find_block(prefix, 4, 0), 0);
  EXPECT_EQ(find_block(prefix, 4, 3), 0);
  EXPECT_EQ(find_block(prefix, 4, 4), 2);
  EXPECT_EQ(find_block(prefix, 4, 11), 3);
}

}  // namespace
}  // namespace loom::pack
