#include "type/wire.hpp"

#include <cstring>

namespace loom::type {
namespace {

constexpr int kMaxDepth = 64;  // deeper than any canonical form of a real type
constexpr uint64_t kMaxItems = uint64_t{1} << 20;

void put(std::vector<unsigned char>* out, int64_t v) {
  unsigned char b[8];
  std::memcpy(b, &v, 8);
  out->insert(out->end(), b, b + 8);
}

bool put_node(const Node& n, std::vector<unsigned char>* out, size_t max) {
  if (out->size() + 17 > max) return false;
  out->push_back(static_cast<unsigned char>(n.kind));
  put(out, n.disp);
  switch (n.kind) {
    case Kind::kDense:
      put(out, n.len);
      return true;
    case Kind::kStrided:
      put(out, n.count);
      if (out->size() + 8 > max) return false;
      put(out, n.stride);
      return put_node(*n.child, out, max);
    case Kind::kList:
      put(out, static_cast<int64_t>(n.items.size()));
      for (const auto& it : n.items)
        if (!put_node(*it, out, max)) return false;
      return true;
  }
  return false;
}

struct Reader {
  const unsigned char* p;
  size_t n, at = 0;
  bool get(int64_t* v) {
    if (n - at < 8) return false;
    std::memcpy(v, p + at, 8);
    at += 8;
    return true;
  }
};

Result<NodePtr> get_node(Reader& r, int depth) {
  const Status bad(Err::kInvalidArg, "not an encoded datatype layout");
  if (depth > kMaxDepth || r.at >= r.n) return bad;
  const unsigned char kind = r.p[r.at++];
  int64_t disp = 0, a = 0;
  if (!r.get(&disp) || !r.get(&a)) return bad;
  NodePtr out;
  switch (static_cast<Kind>(kind)) {
    case Kind::kDense:
      if (a < 0) return bad;
      out = make_dense(a, disp);
      break;
    case Kind::kStrided: {
      int64_t stride = 0;
      if (a < 0 || !r.get(&stride)) return bad;
      auto child = get_node(r, depth + 1);
      if (!child) return child.status();
      out = make_strided(a, stride, std::move(child.value()), disp);
      break;
    }
    case Kind::kList: {
      // Each item takes at least 17 bytes: a count beyond what is left is a lie.
      if (a < 0 || static_cast<uint64_t>(a) > kMaxItems ||
          static_cast<uint64_t>(a) > (r.n - r.at) / 17)
        return bad;
      std::vector<NodePtr> items;
      items.reserve(static_cast<size_t>(a));
      for (int64_t i = 0; i < a; ++i) {
        auto it = get_node(r, depth + 1);
        if (!it) return it.status();
        items.push_back(std::move(it.value()));
      }
      out = make_list(std::move(items), disp);
      break;
    }
    default:
      return bad;
  }
  if (out->overflow) return Status(Err::kOverflow, "encoded layout overflows 64 bits");
  return out;
}

}  // namespace

bool encode(const NodePtr& n, std::vector<unsigned char>* out, size_t max) {
  const size_t before = out->size();
  if (n && put_node(*n, out, max)) return true;
  out->resize(before);
  return false;
}

Result<NodePtr> decode(const unsigned char* p, size_t n, size_t* used) {
  Reader r{p, n};
  auto t = get_node(r, 0);
  if (t && used) *used = r.at;
  return t;
}

}  // namespace loom::type
