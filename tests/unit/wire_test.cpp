#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "random_ir.hpp"
#include "type/canonical.hpp"
#include "type/wire.hpp"

namespace loom::type {
namespace {

NodePtr round_trip(const NodePtr& n) {
  std::vector<unsigned char> bytes;
  EXPECT_TRUE(encode(n, &bytes, size_t{1} << 20));
  size_t used = 0;
  auto back = decode(bytes.data(), bytes.size(), &used);
  EXPECT_TRUE(back.is_ok());
  EXPECT_EQ(used, bytes.size());
  return back ? back.value() : nullptr;
}

TEST(Wire, RandomTreesComeBackEqual) {
  std::mt19937_64 rng(20261127);
  for (int i = 0; i < 500; ++i) {
    NodePtr t = test::random_tree(rng, 4);
    for (const NodePtr& n : {t, canonicalize(t)}) {
      if (!n) continue;
      NodePtr back = round_trip(n);
      ASSERT_TRUE(back);
      EXPECT_TRUE(equal(*n, *back)) << to_string(n) << " vs " << to_string(back);
      EXPECT_EQ(test::naive_blocks(n), test::naive_blocks(back));
    }
  }
}

TEST(Wire, TooLongForTheLimitLeavesTheOutputAsItWas) {
  std::vector<NodePtr> items;
  for (int i = 0; i < 100; ++i) items.push_back(make_dense(1, 3 * i));
  NodePtr list = make_list(items);
  std::vector<unsigned char> out = {7, 7};
  EXPECT_FALSE(encode(list, &out, 1000));
  EXPECT_EQ(out, (std::vector<unsigned char>{7, 7}));
  EXPECT_TRUE(encode(list, &out, 4000));
}

TEST(Wire, EveryTruncationAndCorruptionIsAnErrorNotACrash) {
  NodePtr n = make_strided(5, 64, make_list({make_dense(8), make_dense(4, 16)}), 8);
  std::vector<unsigned char> bytes;
  ASSERT_TRUE(encode(n, &bytes, 4096));
  for (size_t len = 0; len < bytes.size(); ++len)
    EXPECT_FALSE(decode(bytes.data(), len, nullptr).is_ok()) << "truncated to " << len;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {  // random bytes flipped: a tree or an error
    std::vector<unsigned char> b = bytes;
    b[rng() % b.size()] ^= static_cast<unsigned char>(1u << (rng() % 8));
    auto t = decode(b.data(), b.size(), nullptr);
    if (t) {
      EXPECT_FALSE(t.value()->overflow);
    }
  }
  std::vector<unsigned char> bad_kind = bytes;
  bad_kind[0] = 9;
  EXPECT_EQ(decode(bad_kind.data(), bad_kind.size(), nullptr).status().code(), Err::kInvalidArg);
}

TEST(Wire, OverflowingSizesAreRefused) {
  const int64_t big = int64_t{1} << 62;
  std::vector<unsigned char> bytes;
  ASSERT_TRUE(encode(make_strided(2, 1, make_dense(1)), &bytes, 4096));
  // Patch the count and the dense length so that count * len overflows.
  std::memcpy(&bytes[9], &big, 8);
  std::memcpy(&bytes[9 + 8 + 8 + 9], &big, 8);
  EXPECT_EQ(decode(bytes.data(), bytes.size(), nullptr).status().code(), Err::kOverflow);
}

}  // namespace
}  // namespace loom::type
