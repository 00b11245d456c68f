#include <gtest/gtest.h>

#include "random_ir.hpp"
#include "type/canonical.hpp"

namespace loom::type {
namespace {

std::string canon(const NodePtr& n) {
  return to_string(canonicalize(n));
}

TEST(Canonical, EmptyPiecesVanish) {
  EXPECT_EQ(canon(make_dense(0)), "empty");
  EXPECT_EQ(canon(make_strided(0, 8, make_dense(4))), "empty");
  EXPECT_EQ(canon(make_strided(5, 8, make_dense(0))), "empty");
  EXPECT_EQ(canon(make_list({make_dense(0), make_dense(4, 8), make_list({})})), "D4@8");
}

TEST(Canonical, CountOneRepetitionIsItsChild) {
  EXPECT_EQ(canon(make_strided(1, 999, make_dense(4, 3), 5)), "D4@8");
}

TEST(Canonical, DenseBlocksFold) {
  EXPECT_EQ(canon(make_strided(4, 8, make_dense(8))), "D32");
  EXPECT_EQ(canon(make_list({make_dense(4), make_dense(4, 4), make_dense(8, 8)})), "D16");
}

TEST(Canonical, NestedStridesFlatten) {
  // vector of 4 rows, each a vector of 3 x 4 B at 16: rows 48 apart tile.
  EXPECT_EQ(canon(make_strided(4, 48, make_strided(3, 16, make_dense(4)))), "S(12,16){D4}");
  // Rows that do not tile stay 2D.
  EXPECT_EQ(canon(make_strided(4, 64, make_strided(3, 16, make_dense(4)))), "S(4,64){S(3,16){D4}}");
}

TEST(Canonical, DispsMoveOutward) {
  auto n = make_strided(3, 100, make_dense(4, 20), 7);
  EXPECT_EQ(canon(n), "S(3,100){D4}@27");
}

TEST(Canonical, HandIndexedCase) {
  // indexed blen {2,2,2,2,3,4} disps {1,10,18,26,40,56} of 4 B elements.
  int64_t bl[] = {2, 2, 2, 2, 3, 4}, dp[] = {1, 10, 18, 26, 40, 56};
  std::vector<NodePtr> items;
  for (int i = 0; i < 6; ++i) items.push_back(make_strided(bl[i], 4, make_dense(4), dp[i] * 4));
  EXPECT_EQ(canon(make_list(items)), "L[D8,S(3,32){D8}@36,D12@156,D16@220]@4");
}

TEST(Canonical, RunsAbsorbNeighbours) {
  // [S(3,s){D}, D@3s] and [D, S(3,s){D}@s] and four loose Ds: one form.
  auto d = make_dense(4);
  auto a = make_list({make_strided(3, 16, d), make_dense(4, 48)});
  auto b = make_list({make_dense(4), make_strided(3, 16, d, 16)});
  auto c = make_list({make_dense(4), make_dense(4, 16), make_dense(4, 32), make_dense(4, 48)});
  EXPECT_EQ(canon(a), "S(4,16){D4}");
  EXPECT_EQ(canon(b), "S(4,16){D4}");
  EXPECT_EQ(canon(c), "S(4,16){D4}");
}

TEST(Canonical, LargeListsKeepTheirStructure) {
  // Over kExpandBlocks blocks: items merge as runs without being expanded.
  auto row = make_strided(3000, 16, make_dense(4));
  auto n = make_list({row, shifted(row, 48000)});
  EXPECT_EQ(canon(n), "S(6000,16){D4}");
}

TEST(Canonical, RepeatTilesContiguousTypes) {
  EXPECT_EQ(to_string(repeat(make_dense(12), 10, 12)), "D120");
  EXPECT_EQ(to_string(repeat(make_dense(12), 10, 16)), "S(10,16){D12}");
  EXPECT_EQ(to_string(repeat(canonicalize(make_strided(4, 32, make_dense(8))), 5, 128)),
            "S(20,32){D8}");
}

// Property tests over seeded random trees: canonicalisation keeps every data
// byte in order, is idempotent, and equal forms hash equal.
TEST(Canonical, RandomTreesKeepTheirBytes) {
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    NodePtr ir = test::random_tree(rng, 4);
    NodePtr form = canonicalize(ir);
    ASSERT_EQ(test::naive_bytes(ir), test::naive_bytes(form))
        << to_string(ir) << " -> " << to_string(form);
    NodePtr again = canonicalize(form);
    ASSERT_EQ(to_string(again), to_string(form));
    if (form) {
      ASSERT_TRUE(equal(*again, *form));
      ASSERT_EQ(again->hash, form->hash);
      ASSERT_EQ(form->size, ir->size);
    }
  }
}

// A layout spelled as expanded dense blocks and as its tree: same form when
// the list is small enough to expand.
TEST(Canonical, RandomTreesEqualTheirFlatSpelling) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    NodePtr ir = test::random_tree(rng, 4);
    if (!ir || ir->nblocks > kExpandBlocks || ir->kind != Kind::kList) continue;
    std::vector<NodePtr> flat;
    for (auto [off, len] : test::naive_blocks(ir)) flat.push_back(make_dense(len, off));
    ASSERT_EQ(to_string(canonicalize(make_list(flat))), to_string(canonicalize(ir)));
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace loom::type
