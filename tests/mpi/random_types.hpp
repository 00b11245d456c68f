// Seeded random MPI datatypes: every constructor, nested up to a depth,
// with a readable recipe for failure messages. Shared by the MPI and GPU
// differential tests.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <random>
#include <string>

namespace loom::test {

class RandomTypes {
 public:
  explicit RandomTypes(uint64_t seed) : rng_(seed) {}
  // A new, uncommitted type of nesting depth <= depth; the caller commits and
  // frees it. Size stays under about 256 KiB and true extent under 4 MiB.
  MPI_Datatype make(int depth);
  // The constructor calls that built the last type, as text.
  const std::string& recipe() const { return recipe_; }
  std::mt19937_64& rng() { return rng_; }

 private:
  MPI_Datatype build(int depth, std::string& recipe);
  MPI_Datatype leaf(std::string& recipe);
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool large_count() { return pick(0, 2) == 0; }  // use the MPI-4 _c variant

  std::mt19937_64 rng_;
  std::string recipe_;
};

}  // namespace loom::test
