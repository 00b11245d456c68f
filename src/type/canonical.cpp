#include "type/canonical.hpp"

#include <vector>

namespace loom::type {
namespace {

NodePtr strided(int64_t count, int64_t stride, NodePtr c, int64_t disp);

// A list item seen as a run: `k` copies of `unit`, `step` apart, starting at
// `start`. The unit keeps its own disp (equal_shape ignores it), so viewing
// an item allocates nothing; `item` is the item itself, emitted unchanged
// when the run stays a single item.
struct Run {
  NodePtr unit;
  NodePtr item;
  int64_t k = 1;
  int64_t step = 0;
  int64_t start = 0;
};

Run view(const NodePtr& item, bool flat) {
  if (flat && item->kind == Kind::kStrided)
    return {item->child, item, item->count, item->stride, item->disp};
  return {item, item, 1, 0, item->disp};
}

// Extends run r by item v if v continues it; returns false otherwise.
bool try_extend(Run& r, const Run& v) {
  if (!equal_shape(*r.unit, *v.unit)) return false;
  int64_t expect = 0;
  if (r.k == 1 && v.k == 1) {
    r.step = v.start - r.start;
    r.k = 2;
    return true;
  }
  if (r.k == 1) {  // v.k > 1: v's step decides
    if (v.start - r.start != v.step) return false;
    r.step = v.step;
    r.k += v.k;
    return true;
  }
  if (v.k > 1 && v.step != r.step) return false;
  if (!checked_mul(r.k, r.step, &expect) || !checked_add(r.start, expect, &expect)) return false;
  if (v.start != expect) return false;
  r.k += v.k;
  return true;
}

NodePtr emit(const Run& r) {
  if (r.k == 1) return r.item;
  // strided() moves the unit's own disp outward; copy 0 begins at start.
  return strided(r.k, r.step, r.unit, r.start - r.unit->disp);
}

// One pass of run merging. `flat`: Strided items count as runs of their child.
std::vector<NodePtr> merge_runs(const std::vector<NodePtr>& items, bool flat) {
  std::vector<NodePtr> out;
  size_t n = items.size(), i = 0;
  while (i < n) {
    Run r = view(items[i], flat);
    size_t j = i + 1;
    while (j < n) {
      Run t = r;
      if (!try_extend(t, view(items[j], flat))) break;
      r = t;
      ++j;
    }
    // Two single items that pair up only by accident: if the next item starts
    // a longer run with its own successor, leave this one alone.
    if (j == i + 2 && view(items[i], flat).k == 1 && view(items[i + 1], flat).k == 1 && j < n) {
      Run next = view(items[i + 1], flat);
      if (try_extend(next, view(items[j], flat))) {
        out.push_back(items[i]);
        ++i;
        continue;
      }
    }
    out.push_back(emit(r));
    i = j;
  }
  return out;
}

std::vector<NodePtr> merge_dense(const std::vector<NodePtr>& items) {
  std::vector<NodePtr> out;
  for (const auto& it : items) {
    if (!out.empty() && it->kind == Kind::kDense && out.back()->kind == Kind::kDense &&
        out.back()->disp + out.back()->len == it->disp) {
      out.back() = make_dense(out.back()->len + it->len, out.back()->disp);
    } else {
      out.push_back(it);
    }
  }
  return out;
}

// Appends the Dense blocks of n (shifted by base) in order.
void expand(const NodePtr& n, int64_t base, std::vector<NodePtr>& out) {
  int64_t at = base + n->disp;
  switch (n->kind) {
    case Kind::kDense:
      out.push_back(make_dense(n->len, at));
      break;
    case Kind::kStrided:
      for (int64_t i = 0; i < n->count; ++i) expand(n->child, at + i * n->stride, out);
      break;
    case Kind::kList:
      for (const auto& it : n->items) expand(it, at, out);
      break;
  }
}

NodePtr list(std::vector<NodePtr> items, int64_t disp) {
  int64_t nblocks = 0;
  for (const auto& it : items) nblocks += it->nblocks;
  if (nblocks <= kExpandBlocks) {
    std::vector<NodePtr> flat;
    for (const auto& it : items) expand(it, 0, flat);
    items = std::move(flat);
  }
  for (size_t before = items.size() + 1; items.size() < before;) {
    before = items.size();
    items = merge_runs(merge_runs(merge_dense(items), true), false);
  }
  if (items.empty()) return nullptr;
  if (items.size() == 1) return shifted(items[0], disp);
  int64_t first = items[0]->disp;
  for (auto& it : items) it = shifted(it, -first);
  return make_list(std::move(items), disp + first);
}

NodePtr strided(int64_t count, int64_t stride, NodePtr c, int64_t disp) {
  if (!c || count == 0) return nullptr;
  disp += c->disp;
  c = shifted(c, -c->disp);
  if (count == 1) return shifted(c, disp);
  int64_t n = 0;
  if (c->kind == Kind::kDense && stride == c->len && checked_mul(count, c->len, &n))
    return make_dense(n, disp);
  if (c->kind == Kind::kStrided && checked_mul(c->count, c->stride, &n) && stride == n &&
      checked_mul(count, c->count, &n))
    return strided(n, c->stride, c->child, disp);
  return make_strided(count, stride, std::move(c), disp);
}

}  // namespace

NodePtr canonicalize(const NodePtr& n) {
  if (!n || n->size == 0) return nullptr;
  switch (n->kind) {
    case Kind::kDense:
      return n;
    case Kind::kStrided:
      return strided(n->count, n->stride, canonicalize(n->child), n->disp);
    case Kind::kList: {
      std::vector<NodePtr> items;
      for (const auto& it : n->items) {
        NodePtr c = canonicalize(it);
        if (!c) continue;
        if (c->kind == Kind::kList) {
          for (const auto& sub : c->items) items.push_back(shifted(sub, c->disp));
        } else {
          items.push_back(std::move(c));
        }
      }
      return list(std::move(items), n->disp);
    }
  }
  return nullptr;
}

NodePtr repeat(const NodePtr& form, int64_t count, int64_t extent) {
  return strided(count, extent, form, 0);
}

}  // namespace loom::type
