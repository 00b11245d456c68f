#include "gpu_test_util.hpp"

#include <algorithm>
#include <cstdio>

#include "type/canonical.hpp"

namespace loom::test {

using type::NodePtr;

pack::Layout layout_of(const NodePtr& t, int64_t count, int64_t extent) {
  NodePtr form = type::canonicalize(t);
  if (extent == 0 && form) extent = form->hi - form->lo;
  auto l = pack::make_layout(count == 1 ? form : type::repeat(form, count, extent));
  if (!l) {
    std::fprintf(stderr, "make_layout failed: %s\n", l.status().message().c_str());
    return {};
  }
  return l.value();
}

NodePtr strided_tree(int64_t block, const std::vector<std::pair<int64_t, int64_t>>& dims) {
  NodePtr n = type::make_dense(block);
  for (size_t i = dims.size(); i-- > 0;) n = type::make_strided(dims[i].first, dims[i].second, n);
  return n;
}

NodePtr hand_tree() {
  const int64_t blen[] = {2, 2, 2, 2, 3, 4};
  const int64_t disp[] = {1, 10, 18, 26, 40, 56};
  std::vector<NodePtr> items;
  for (int i = 0; i < 6; ++i) items.push_back(type::make_dense(blen[i] * 4, disp[i] * 4));
  return type::make_list(std::move(items));
}

NodePtr struct_tree() {
  std::vector<NodePtr> items = {type::make_dense(4, 0),    type::make_dense(8, 8),
                                type::make_dense(2, 16),   type::make_dense(16, 32),
                                type::make_dense(1, 50),   type::make_dense(1000, 64),
                                type::make_dense(12, 1072)};
  return type::make_list(std::move(items));
}

NodePtr particle_tree() {
  std::vector<NodePtr> items = {type::make_dense(24, 0), type::make_dense(4, 48),
                                type::make_dense(4, 52)};
  return type::make_list(std::move(items));
}

namespace {

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

}  // namespace

NodePtr random_tree(std::mt19937_64& rng, int max_depth) {
  const int choice = max_depth <= 0 ? 0 : static_cast<int>(pick(rng, 0, 5));
  if (choice <= 1) {
    const int64_t lens[] = {1, 2, 3, 4, 7, 8, 12, 16, 24, 32, 64, 100, 300};
    return type::make_dense(lens[pick(rng, 0, 12)]);
  }
  if (choice <= 3) {
    NodePtr c = random_tree(rng, max_depth - 1);
    const int64_t span = c->hi - c->lo;
    const int64_t gaps[] = {0, 1, 3, 4, 8, 13, 16, 32};
    const int64_t step = span + gaps[pick(rng, 0, 7)];
    const int64_t count = pick(rng, 1, 7);
    if (pick(rng, 0, 3) == 0)  // backwards: element 0 last in memory
      return type::make_strided(count, -step, c, (count - 1) * step);
    return type::make_strided(count, step, c);
  }
  std::vector<NodePtr> items;
  const int64_t n = pick(rng, 1, 5);
  int64_t at = pick(rng, 0, 8);
  for (int64_t i = 0; i < n; ++i) {
    NodePtr c = random_tree(rng, max_depth - 1);
    items.push_back(type::shifted(c, at - c->lo - c->disp));
    at += c->hi - c->lo + pick(rng, 0, 12);
  }
  return type::make_list(std::move(items));
}

Span span_of(const pack::Layout& l) {
  Span s;
  if (l.kind == pack::LayoutKind::kEmpty || l.total == 0) return s;
  int64_t lo = 0, hi = 0;  // of the unit origins
  for (const pack::Dim& d : l.dims) {
    const int64_t far = (d.count - 1) * d.stride;
    lo += std::min<int64_t>(0, far);
    hi += std::max<int64_t>(0, far);
  }
  int64_t ulo = 0, uhi = 0;  // of one unit
  switch (l.kind) {
    case pack::LayoutKind::kContiguous:
      uhi = l.total;
      break;
    case pack::LayoutKind::kStrided:
      uhi = l.block_len;
      break;
    case pack::LayoutKind::kBlocks:
      ulo = l.blocks[0].off;
      uhi = l.blocks[0].off + l.blocks[0].len;
      for (const pack::Block& b : l.blocks) {
        ulo = std::min(ulo, b.off);
        uhi = std::max(uhi, b.off + b.len);
      }
      break;
    default:
      break;
  }
  s.lo = l.base + lo + ulo;
  s.hi = l.base + hi + uhi;
  return s;
}

void fill_pattern(std::vector<unsigned char>& v, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < v.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<unsigned char>(x);
  }
}

std::string first_difference(const unsigned char* a, const unsigned char* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) {
      char buf[120];
      std::snprintf(buf, sizeof buf, "first difference at byte %zu of %zu: got 0x%02x, want 0x%02x",
                    i, n, a[i], b[i]);
      return buf;
    }
  }
  return "";
}

}  // namespace loom::test
