// Layouts and helpers shared by the GPU engine tests (GPU and CPU-only).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "pack/layout.hpp"
#include "type/ir.hpp"

namespace loom::test {

// Layout of `count` elements of tree `t` (element i at i * extent; extent 0:
// the tree's own span), through canonicalize / repeat / make_layout.
pack::Layout layout_of(const type::NodePtr& t, int64_t count = 1, int64_t extent = 0);

// Blocks of `block` bytes over dims {count, stride}, outermost first.
type::NodePtr strided_tree(int64_t block, const std::vector<std::pair<int64_t, int64_t>>& dims);

// The HAND case: indexed blen {2,2,2,2,3,4} x 4 B at {1,10,18,26,40,56} x 4 B.
type::NodePtr hand_tree();
inline constexpr int64_t kHandExtent = 60 * 4;  // its MPI extent: 0 .. (56 + 4) * 4

// A struct-like element: fields of mixed lengths at padded offsets, one long.
type::NodePtr struct_tree();
// The fields sent of a particle {double pos[3], vel[3]; float mass; int id;
// char kind} (64 B with padding): pos, mass and id.
type::NodePtr particle_tree();
inline constexpr int64_t kParticleExtent = 64;

// A random tree whose data bytes never overlap (so unpack is well defined),
// with strides of both signs; depth <= max_depth.
type::NodePtr random_tree(std::mt19937_64& rng, int max_depth);

// Byte range [lo, hi) of the user buffer the layout touches, relative to the
// user pointer (base included).
struct Span {
  int64_t lo = 0;
  int64_t hi = 0;
};
Span span_of(const pack::Layout& l);

// Deterministic filler.
void fill_pattern(std::vector<unsigned char>& v, uint64_t seed);

// "" when equal, else the first differing index and bytes.
std::string first_difference(const unsigned char* a, const unsigned char* b, size_t n);

}  // namespace loom::test
