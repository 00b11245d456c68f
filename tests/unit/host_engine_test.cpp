#include <gtest/gtest.h>

#include <cstring>

#include "pack/host_engine.hpp"
#include "random_ir.hpp"
#include "type/canonical.hpp"

namespace loom::pack {
namespace {

using namespace loom::type;

// Packs and unpacks random trees (1..3 elements) with the host engine and
// checks against the naive byte walk: packed bytes in order, unpack writes
// exactly the data bytes and leaves every gap byte as it was.
TEST(HostEngine, RandomTreesMatchNaiveWalk) {
  for (uint64_t seed = 1; seed <= 1500; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    NodePtr ir = test::random_tree(rng, 4);
    int64_t count = 1 + static_cast<int64_t>(seed % 3);
    int64_t extent = ir->size ? ir->hi - ir->lo + static_cast<int64_t>(seed % 7) : 1;
    auto l = make_layout(repeat(canonicalize(ir), count, extent));
    ASSERT_TRUE(l.is_ok());
    auto bytes = test::naive_bytes(repeat(ir, count, extent));
    if (bytes.empty()) continue;
    int64_t lo = *std::min_element(bytes.begin(), bytes.end());
    int64_t hi = *std::max_element(bytes.begin(), bytes.end()) + 1;
    const int64_t pad = 16;
    std::vector<unsigned char> user(hi - lo + 2 * pad);
    for (size_t i = 0; i < user.size(); ++i) user[i] = static_cast<unsigned char>(i * 7 + seed);
    unsigned char* origin = user.data() + pad - lo;  // user buffer pointer: byte 0 of the type

    std::vector<unsigned char> packed(bytes.size() + pad, 0xEE);
    host_pack(*l, origin, packed.data());
    for (size_t p = 0; p < bytes.size(); ++p) ASSERT_EQ(packed[p], origin[bytes[p]]) << p;
    for (size_t p = bytes.size(); p < packed.size(); ++p) ASSERT_EQ(packed[p], 0xEE);

    // Unpack into a sentinel-filled buffer: data bytes land in type-map order
    // (last write wins where a type overlaps itself), gaps keep the sentinel.
    std::vector<unsigned char> expect(user.size(), 0x5A), got(user.size(), 0x5A);
    for (size_t p = 0; p < bytes.size(); ++p) expect[pad - lo + bytes[p]] = packed[p];
    host_unpack(*l, packed.data(), got.data() + pad - lo);
    ASSERT_EQ(got, expect);
  }
}

TEST(HostEngine, EmptyLayoutTouchesNothing) {
  Layout l;
  unsigned char a = 1, b = 2;
  host_pack(l, &a, &b);
  host_unpack(l, &a, &b);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
}

}  // namespace
}  // namespace loom::pack
