#include "type/ir.hpp"

#include <algorithm>
#include <cstdio>

namespace loom::type {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over a running FNV-style combine: stable across
  // platforms and builds, which the form hash must be.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

uint64_t shape_hash(const Node& n) {
  uint64_t h = mix(0x4c4f4f4dull, static_cast<uint64_t>(n.kind));
  switch (n.kind) {
    case Kind::kDense:
      h = mix(h, static_cast<uint64_t>(n.len));
      break;
    case Kind::kStrided:
      h = mix(h, static_cast<uint64_t>(n.count));
      h = mix(h, static_cast<uint64_t>(n.stride));
      h = mix(h, n.child->hash);
      break;
    case Kind::kList:
      h = mix(h, n.items.size());
      for (const auto& it : n.items) h = mix(h, it->hash);
      break;
  }
  return h;
}

void finish(Node& n) {
  n.hash = mix(shape_hash(n), static_cast<uint64_t>(n.disp));
}

}  // namespace

bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
bool checked_add(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

NodePtr make_dense(int64_t len, int64_t disp) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::kDense;
  n->disp = disp;
  n->len = len;
  n->size = len;
  n->nblocks = len > 0 ? 1 : 0;
  n->lo = 0;
  n->hi = len;
  finish(*n);
  return n;
}

NodePtr make_strided(int64_t count, int64_t stride, NodePtr child, int64_t disp) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::kStrided;
  n->disp = disp;
  n->count = count;
  n->stride = stride;
  bool ok = !child->overflow && checked_mul(count, child->size, &n->size) &&
            checked_mul(count, child->nblocks, &n->nblocks);
  if (ok && count > 0 && child->size > 0) {
    int64_t span = 0, first = child->disp, last = 0;
    ok = checked_mul(count - 1, stride, &span) && checked_add(first, span, &last) &&
         checked_add(std::min(first, last), child->lo, &n->lo) &&
         checked_add(std::max(first, last), child->hi, &n->hi);
  }
  n->overflow = !ok;
  n->child = std::move(child);
  finish(*n);
  return n;
}

NodePtr make_list(std::vector<NodePtr> items, int64_t disp) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::kList;
  n->disp = disp;
  bool any = false, ok = true;
  for (const auto& it : items) {
    ok = ok && !it->overflow && checked_add(n->size, it->size, &n->size) &&
         checked_add(n->nblocks, it->nblocks, &n->nblocks);
    if (it->size > 0) {
      int64_t lo = 0, hi = 0;
      ok = ok && checked_add(it->disp, it->lo, &lo) && checked_add(it->disp, it->hi, &hi);
      n->lo = any ? std::min(n->lo, lo) : lo;
      n->hi = any ? std::max(n->hi, hi) : hi;
      any = true;
    }
  }
  n->overflow = !ok;
  n->items = std::move(items);
  finish(*n);
  return n;
}

NodePtr shifted(const NodePtr& n, int64_t by) {
  if (by == 0) return n;
  auto c = std::make_shared<Node>(*n);
  c->disp += by;
  finish(*c);
  return c;
}

bool equal_shape(const Node& a, const Node& b) {
  if (&a == &b) return true;
  if (a.kind != b.kind || a.size != b.size || a.nblocks != b.nblocks) return false;
  switch (a.kind) {
    case Kind::kDense:
      return a.len == b.len;
    case Kind::kStrided:
      return a.count == b.count && a.stride == b.stride && equal(*a.child, *b.child);
    case Kind::kList:
      if (a.items.size() != b.items.size()) return false;
      for (size_t i = 0; i < a.items.size(); ++i)
        if (!equal(*a.items[i], *b.items[i])) return false;
      return true;
  }
  return false;
}

bool equal(const Node& a, const Node& b) {
  return a.hash == b.hash && a.disp == b.disp && equal_shape(a, b);
}

static void print(const NodePtr& n, std::string& out) {
  char buf[96];
  switch (n->kind) {
    case Kind::kDense:
      std::snprintf(buf, sizeof buf, "D%lld", (long long)n->len);
      out += buf;
      break;
    case Kind::kStrided:
      std::snprintf(buf, sizeof buf, "S(%lld,%lld){", (long long)n->count, (long long)n->stride);
      out += buf;
      print(n->child, out);
      out += "}";
      break;
    case Kind::kList:
      out += "L[";
      for (size_t i = 0; i < n->items.size(); ++i) {
        if (i) out += ",";
        print(n->items[i], out);
      }
      out += "]";
      break;
  }
  if (n->disp != 0) {
    std::snprintf(buf, sizeof buf, "@%lld", (long long)n->disp);
    out += buf;
  }
}

std::string to_string(const NodePtr& n) {
  if (!n) return "empty";
  std::string s;
  print(n, s);
  return s;
}

}  // namespace loom::type
