// Layout: the flat, kernel-ready description of what `count` elements of a
// canonical form move. Built once per (form, count) and cached by callers.
#pragma once

#include <string>
#include <vector>

#include "pack/index_math.hpp"
#include "type/ir.hpp"
#include "util/status.hpp"

namespace loom::pack {

struct Layout {
  LayoutKind kind = LayoutKind::kEmpty;
  int64_t base = 0;
  int64_t total = 0;
  int64_t block_len = 0;
  std::vector<Dim> dims;        // outermost first, at most kMaxDims
  std::vector<Block> blocks;    // kBlocks: one tile
  std::vector<int64_t> prefix;  // kBlocks: nblocks + 1 entries
  int64_t tile_bytes = 0;

  // A view over this layout's arrays (host memory); valid while it lives.
  LayoutView view() const;
  int64_t nblocks_total() const;  // blocks moved in all
  std::string describe() const;   // "strided 2D: 1024 x 8 B, strides {4096}"
};

// From a canonical tree (type::canonicalize / type::repeat). A null tree is
// the empty layout.
Result<Layout> make_layout(const type::NodePtr& canonical);

// The view of `count` elements `extent` apart, made from the one-element
// layout without allocating (the per-call path). The view points into
// `one`'s arrays. kUnsupported when that needs more than kMaxDims dims (the
// caller then builds a Layout from type::repeat), kOverflow past 64 bits.
Result<LayoutView> repeat_view(const Layout& one, int64_t count, int64_t extent);

}  // namespace loom::pack
