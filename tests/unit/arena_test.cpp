// The stream arena's sub-allocator (transport/arena.hpp): aligned room,
// reuse after give, runs joined again, and a full arena says so.
#include "transport/arena.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace loom::transport {
namespace {

TEST(Arena, TakesAlignedRoomUntilFull) {
  Arena a(4096);
  auto x = a.take(1);
  auto y = a.take(300);
  ASSERT_TRUE(x && y);
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, 256u);  // 1 byte still takes an aligned unit
  auto z = a.take(4096 - 256 - 512);
  ASSERT_TRUE(z);
  EXPECT_EQ(*z, 768u);
  EXPECT_FALSE(a.take(1)) << "the arena is full";
  EXPECT_EQ(a.free_bytes(), 0u);
}

TEST(Arena, GivenRoomJoinsItsNeighbours) {
  Arena a(1024);
  auto p = a.take(256), q = a.take(256), r = a.take(256), s = a.take(256);
  ASSERT_TRUE(p && q && r && s);
  EXPECT_FALSE(a.take(256));
  a.give(*q, 256);
  a.give(*s, 256);
  EXPECT_FALSE(a.take(512)) << "two free units that do not touch";
  a.give(*r, 256);  // joins q and s
  auto big = a.take(768);
  ASSERT_TRUE(big);
  EXPECT_EQ(*big, 256u);
  a.give(*big, 768);
  a.give(*p, 256);
  EXPECT_EQ(a.free_bytes(), 1024u);
  EXPECT_TRUE(a.take(1024));
}

TEST(Arena, RandomTakesAndGivesNeverOverlap) {
  Arena a(1 << 20);
  std::mt19937 rng(7);
  struct Held {
    size_t at, bytes;
  };
  std::vector<Held> held;
  for (int i = 0; i < 20000; ++i) {
    if (!held.empty() && (rng() % 2 == 0)) {
      const size_t k = rng() % held.size();
      a.give(held[k].at, held[k].bytes);
      held[k] = held.back();
      held.pop_back();
      continue;
    }
    const size_t bytes = 1 + rng() % 20000;
    auto at = a.take(bytes);
    if (!at) continue;
    EXPECT_EQ(*at % Arena::kAlign, 0u);
    EXPECT_LE(*at + bytes, a.size());
    for (const Held& h : held) ASSERT_TRUE(*at + bytes <= h.at || h.at + h.bytes <= *at);
    held.push_back({*at, bytes});
  }
  for (const Held& h : held) a.give(h.at, h.bytes);
  EXPECT_EQ(a.free_bytes(), a.size());
}

}  // namespace
}  // namespace loom::transport
