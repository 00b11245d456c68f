#include "pack/layout.hpp"

#include <cstdio>

namespace loom::pack {
namespace {

void expand(const type::NodePtr& n, int64_t at, std::vector<Block>& out) {
  at += n->disp;
  switch (n->kind) {
    case type::Kind::kDense:
      if (!out.empty() && out.back().off + out.back().len == at)
        out.back().len += n->len;
      else
        out.push_back({at, n->len});
      break;
    case type::Kind::kStrided:
      for (int64_t i = 0; i < n->count; ++i) expand(n->child, at + i * n->stride, out);
      break;
    case type::Kind::kList:
      for (const auto& it : n->items) expand(it, at, out);
      break;
  }
}

}  // namespace

Result<Layout> make_layout(const type::NodePtr& canonical) {
  Layout l;
  if (!canonical) return l;
  if (canonical->overflow) return Status(Err::kOverflow, "layout size does not fit in 64 bits");
  l.total = canonical->size;
  type::NodePtr n = canonical;
  // Outer strided chain; past kMaxDims - 1 dims the rest becomes a block tile.
  while (n->kind == type::Kind::kStrided && static_cast<int>(l.dims.size()) < kMaxDims - 1) {
    l.base += n->disp;
    l.dims.push_back({n->count, n->stride});
    n = n->child;
  }
  if (n->kind == type::Kind::kDense) {
    l.base += n->disp;
    l.block_len = n->len;
    l.kind = l.dims.empty() ? LayoutKind::kContiguous : LayoutKind::kStrided;
    return l;
  }
  l.kind = LayoutKind::kBlocks;
  expand(n, 0, l.blocks);
  l.prefix.resize(l.blocks.size() + 1);
  l.prefix[0] = 0;
  for (size_t i = 0; i < l.blocks.size(); ++i) l.prefix[i + 1] = l.prefix[i] + l.blocks[i].len;
  l.tile_bytes = l.prefix.back();
  if (l.dims.empty()) l.dims.push_back({1, 0});  // keeps tile math uniform
  return l;
}

Result<LayoutView> repeat_view(const Layout& one, int64_t count, int64_t extent) {
  LayoutView v = one.view();
  if (count == 1 || one.kind == LayoutKind::kEmpty) return v;
  if (count == 0) return LayoutView{};
  if (!type::checked_mul(one.total, count, &v.total))
    return Status(Err::kOverflow, "message size does not fit in 64 bits");
  if (one.kind == LayoutKind::kContiguous) {
    if (extent == one.total) return v;  // elements tile: still one block
    v.kind = LayoutKind::kStrided;
    v.ndims = 1;
    v.dims[0] = {count, extent};
    v.block_len = one.total;
    return v;
  }
  // Strided or blocks: the repetition folds into the outermost dim when the
  // elements continue it, replaces the blocks' placeholder dim, or is a new
  // outermost dim.
  Dim& outer = v.dims[0];
  int64_t span = 0;
  if (one.kind == LayoutKind::kBlocks && outer.count == 1) {
    outer = {count, extent};
  } else if (type::checked_mul(outer.count, outer.stride, &span) && span == extent &&
             type::checked_mul(outer.count, count, &span)) {
    outer.count = span;
  } else {
    if (v.ndims >= kMaxDims) return Status(Err::kUnsupported, "too many dims for a view");
    for (int d = v.ndims; d > 0; --d) v.dims[d] = v.dims[d - 1];
    v.dims[0] = {count, extent};
    ++v.ndims;
  }
  return v;
}

LayoutView Layout::view() const {
  LayoutView v;
  v.kind = kind;
  v.ndims = static_cast<int>(dims.size());
  v.base = base;
  v.total = total;
  v.block_len = block_len;
  for (size_t i = 0; i < dims.size(); ++i) v.dims[i] = dims[i];
  v.blocks = blocks.data();
  v.prefix = prefix.data();
  v.nblocks = static_cast<int64_t>(blocks.size());
  v.tile_bytes = tile_bytes;
  return v;
}

int64_t Layout::nblocks_total() const {
  switch (kind) {
    case LayoutKind::kEmpty:
      return 0;
    case LayoutKind::kContiguous:
      return 1;
    case LayoutKind::kStrided:
      return total / block_len;
    case LayoutKind::kBlocks:
      return (total / tile_bytes) * static_cast<int64_t>(blocks.size());
  }
  return 0;
}

std::string Layout::describe() const {
  char buf[160];
  std::string s;
  switch (kind) {
    case LayoutKind::kEmpty:
      return "empty";
    case LayoutKind::kContiguous:
      std::snprintf(buf, sizeof buf, "contiguous %lld B at %lld", (long long)total,
                    (long long)base);
      return buf;
    case LayoutKind::kStrided:
      std::snprintf(buf, sizeof buf, "strided %dD: %lld x %lld B at %lld, strides {",
                    (int)dims.size() + 1, (long long)(total / block_len), (long long)block_len,
                    (long long)base);
      s = buf;
      break;
    case LayoutKind::kBlocks:
      std::snprintf(buf, sizeof buf, "blocks: %lld tiles x %zu blocks (%lld B) at %lld, strides {",
                    (long long)(total / tile_bytes), blocks.size(), (long long)tile_bytes,
                    (long long)base);
      s = buf;
      break;
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%lld x %lld", i ? ", " : "", (long long)dims[i].count,
                  (long long)dims[i].stride);
    s += buf;
  }
  return s + "}";
}

}  // namespace loom::pack
