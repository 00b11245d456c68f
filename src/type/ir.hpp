// Loom's datatype IR: an immutable tree of byte layouts, MPI-free.
//
//   Dense(len)                 len contiguous bytes at the node's origin
//   Strided(count, stride, c)  count copies of child c, the i-th at i*stride bytes
//   List(items)                the items in order (irregular parts: indexed, struct)
//
// Every node carries `disp`, the byte offset of its origin from its parent's
// origin. The order of the tree is the order of the MPI type map, which is the
// order of the packed bytes: rewrites never reorder data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::type {

struct Node;
using NodePtr = std::shared_ptr<const Node>;

enum class Kind : uint8_t { kDense, kStrided, kList };

struct Node {
  Kind kind = Kind::kDense;
  int64_t disp = 0;
  // Dense
  int64_t len = 0;
  // Strided
  int64_t count = 0;
  int64_t stride = 0;
  NodePtr child;
  // List
  std::vector<NodePtr> items;

  // Derived at construction (make_* below): data bytes, number of Dense
  // blocks the node expands to, and the byte range [lo, hi) its data covers
  // relative to the node's own origin (disp excluded). lo/hi are meaningless
  // when size == 0.
  int64_t size = 0;
  int64_t nblocks = 0;
  int64_t lo = 0, hi = 0;
  uint64_t hash = 0;      // structural hash, disp included
  bool overflow = false;  // a derived field did not fit in 64 bits (here or below)
};

// Constructors compute the derived fields with checked arithmetic; a result
// that does not fit sets `overflow`, which the translator turns into an error.
NodePtr make_dense(int64_t len, int64_t disp = 0);
NodePtr make_strided(int64_t count, int64_t stride, NodePtr child, int64_t disp = 0);
NodePtr make_list(std::vector<NodePtr> items, int64_t disp = 0);
NodePtr shifted(const NodePtr& n, int64_t by);  // same node, disp + by

// Structural equality, disp included.
bool equal(const Node& a, const Node& b);
// Equality ignoring the two nodes' own disp (children's disps still count).
bool equal_shape(const Node& a, const Node& b);

// One-line text form, e.g. "S(4,32){D8}@4". Stable: used in docs and tests.
std::string to_string(const NodePtr& n);

// Overflow-checked 64-bit arithmetic for building IR from user input.
bool checked_mul(int64_t a, int64_t b, int64_t* out);
bool checked_add(int64_t a, int64_t b, int64_t* out);

}  // namespace loom::type
