// Seeded random IR trees and an independent byte-level oracle for them.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "type/ir.hpp"

namespace loom::test {

// A random tree of depth <= max_depth, with bounded size.
type::NodePtr random_tree(std::mt19937_64& rng, int max_depth);

// The (offset, length) of every data byte run in type-map order, computed by
// walking the tree naively: the oracle the canonical form and layouts must match.
std::vector<std::pair<int64_t, int64_t>> naive_blocks(const type::NodePtr& n, int64_t base = 0);

// Byte offsets in type-map order (one per data byte).
std::vector<int64_t> naive_bytes(const type::NodePtr& n, int64_t base = 0);

}  // namespace loom::test
