#include "random_ir.hpp"

namespace loom::test {
namespace {

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

}  // namespace

type::NodePtr random_tree(std::mt19937_64& rng, int max_depth) {
  int choice = max_depth <= 0 ? 0 : static_cast<int>(pick(rng, 0, 4));
  switch (choice) {
    case 0:
    case 1: {
      int64_t lens[] = {0, 1, 2, 3, 4, 8, 12, 16, 24};
      auto len = lens[pick(rng, 0, 8)];
      return type::make_dense(len, pick(rng, 0, 3) == 0 ? pick(rng, -16, 16) : 0);
    }
    case 2:
    case 3: {
      auto child = random_tree(rng, max_depth - 1);
      int64_t span = std::max<int64_t>(1, child->hi - child->lo);
      int64_t count = pick(rng, 0, 5) == 0 ? pick(rng, 0, 1) : pick(rng, 2, 6);
      int64_t stride;
      switch (pick(rng, 0, 3)) {
        case 0:
          stride = span;
          break;  // tiles: may fold
        case 1:
          stride = span + pick(rng, 1, 24);
          break;  // gaps
        case 2:
          stride = -(span + pick(rng, 0, 8));
          break;  // backwards
        default:
          stride = pick(rng, 0, 2 * span);
          break;  // anything, overlaps too
      }
      return type::make_strided(count, stride, child,
                                pick(rng, 0, 2) == 0 ? pick(rng, -32, 32) : 0);
    }
    default: {
      std::vector<type::NodePtr> items;
      int64_t n = pick(rng, 0, 5), at = pick(rng, -32, 32);
      for (int64_t i = 0; i < n; ++i) {
        auto c = random_tree(rng, max_depth - 1);
        items.push_back(type::shifted(c, at));
        at += std::max<int64_t>(0, c->hi) + pick(rng, -4, 12);
      }
      return type::make_list(std::move(items));
    }
  }
}

std::vector<std::pair<int64_t, int64_t>> naive_blocks(const type::NodePtr& n, int64_t base) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (!n) return out;
  base += n->disp;
  switch (n->kind) {
    case type::Kind::kDense:
      if (n->len > 0) out.push_back({base, n->len});
      break;
    case type::Kind::kStrided:
      for (int64_t i = 0; i < n->count; ++i) {
        auto sub = naive_blocks(n->child, base + i * n->stride);
        out.insert(out.end(), sub.begin(), sub.end());
      }
      break;
    case type::Kind::kList:
      for (const auto& it : n->items) {
        auto sub = naive_blocks(it, base);
        out.insert(out.end(), sub.begin(), sub.end());
      }
      break;
  }
  return out;
}

std::vector<int64_t> naive_bytes(const type::NodePtr& n, int64_t base) {
  std::vector<int64_t> out;
  for (auto [off, len] : naive_blocks(n, base))
    for (int64_t i = 0; i < len; ++i) out.push_back(off + i);
  return out;
}

}  // namespace loom::test
