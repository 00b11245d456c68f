// Canonicalisation: rewrite an IR tree to a fixpoint so that equivalent
// descriptions of one byte layout end in the same tree (the canonical form).
//
// Rules (each preserves the packed byte order):
//  - zero-size pieces and count-0 repetitions vanish; count-1 repetitions
//    become their child;
//  - Strided(n, len, Dense(len)) is Dense(n*len)           (fold dense blocks)
//  - Strided(n, m*t, Strided(m, t, c)) is Strided(n*m, t, c) (flatten strides)
//  - nested lists are flattened; adjacent Dense items fold;
//  - runs of equal items at equal spacing inside a list become Strided
//    (merge equal-stride runs), and a run absorbs neighbouring Strided items
//    of the same unit and step;
//  - disps are pushed to the outermost node that can carry them: a Strided
//    child and the first item of a list sit at disp 0.
// Lists of at most kExpandBlocks blocks are first expanded to their Dense
// blocks, so for them the form depends on the byte layout alone, however the
// list was spelled. Dimensions are never reordered: that would change the
// packed order. They are kept outermost first.
#pragma once

#include "type/ir.hpp"

namespace loom::type {

inline constexpr int64_t kExpandBlocks = 4096;

// Returns the canonical tree, or null for a layout with no data bytes.
NodePtr canonicalize(const NodePtr& n);

// The canonical form of `count` elements of a type whose one element has
// canonical form `form` and extent `extent` (element i sits at i*extent).
NodePtr repeat(const NodePtr& form, int64_t count, int64_t extent);

}  // namespace loom::type
