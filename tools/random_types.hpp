// Seeded random MPI datatypes: every constructor, nested up to a depth. Each
// type comes with its description (TypeNode): every constructor call with
// its arguments resolved, so a type can be printed, parsed back, rebuilt and
// shrunk. Shared by the differential tests and loom-fuzz.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace loom::test {

// One constructor call. `op` is a constructor ("contiguous", "vector",
// "hvector", "indexed", "hindexed", "indexed_block", "hindexed_block",
// "struct", "subarray", "darray", "resized", "dup") or a predefined type
// ("INT", "DOUBLE_INT"...). Arguments are in the constructor's order
// (scalars are one-element lists): darray's distributions are 0 none,
// 1 block, 2 cyclic, a darg of -1 is MPI_DISTRIBUTE_DFLT_DARG, and orders
// are 0 C, 1 Fortran. `kids`: the old type(s), one per struct field.
//
// As text: `vector(3 2 -5 INT)`, `struct([2 1] [0 16] INT dup(DOUBLE))`,
// `hvector_c(...)` for the MPI-4 large-count constructor.
struct TypeNode {
  std::string op;
  bool large = false;
  std::vector<std::vector<int64_t>> args;
  std::vector<TypeNode> kids;

  int depth() const;  // constructors on the longest path (a predefined type: 0)
};

std::string to_text(const TypeNode& n);
// Parses to_text's output; false (with *err) on anything else.
bool parse_type(const std::string& text, TypeNode* out, std::string* err);
// Builds the type a description stands for, uncommitted; a predefined type
// for a leaf (the caller frees derived ones only). Returns the MPI's error
// code of the first constructor that fails (with MPI_ERRORS_RETURN), or
// MPI_ERR_ARG for a malformed description. With `trusted`, also says whether
// the MPI under test packs the type right as far as known: false for the
// shapes the generator avoids because the MPI gets them wrong (Open MPI 4.1:
// vectors stepping back by no more than their block; MPICH 4.0: empty
// pieces). Shrinking keeps to trusted types.
int build_type(const TypeNode& n, MPI_Datatype* out, bool* trusted = nullptr);

struct RandomOptions {
  // Beyond the tests' draws (which stay as they were for a given seed):
  // more predefined types (with holes: LONG_INT, LONG_DOUBLE_INT...), and
  // resized types whose bounds cut into or overlap their data.
  bool wide = false;
  int64_t max_size = 256 << 10;       // bytes of data in one element
  int64_t max_true_extent = 4 << 20;  // bytes the data of one element spans
};

class RandomTypes {
 public:
  explicit RandomTypes(uint64_t seed, RandomOptions opt = {}) : rng_(seed), opt_(opt) {}
  // A new, uncommitted type of nesting depth <= depth; the caller commits and
  // frees it. Size and true extent stay under the options' bounds.
  MPI_Datatype make(int depth);
  // The last type's description, and as text.
  const TypeNode& node() const { return node_; }
  std::string recipe() const { return to_text(node_); }
  std::mt19937_64& rng() { return rng_; }

 private:
  MPI_Datatype build(int depth, TypeNode& n);
  MPI_Datatype leaf(TypeNode& n);
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool large_count() { return pick(0, 2) == 0; }  // use the MPI-4 _c variant

  std::mt19937_64 rng_;
  RandomOptions opt_;
  TypeNode node_;
};

}  // namespace loom::test
