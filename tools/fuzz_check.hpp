// One differential check of loom-fuzz: `count` elements of a committed type
// packed and unpacked by Loom's host engine (loom_pack / loom_unpack) and,
// where asked, by its GPU engine, against the MPI's own PMPI_Pack /
// PMPI_Unpack on host memory, byte for byte, gaps included.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

namespace loom::fuzz {

struct CheckOptions {
  bool gpu = false;  // also the GPU engine (CUDA builds with a device)
  // Self-test: corrupt Loom's packed bytes of types whose description
  // holds this constructor, so that the failure path and the shrinker can
  // be shown to work (loom-fuzz --inject).
  std::string inject;
};

struct CheckStats {
  int64_t checks = 0;                 // (type, count) pairs compared
  int64_t unpacks = 0;                // of them, with the unpack compared too
  int64_t gpu_checks = 0;             // compared on the GPU as well
  int64_t handed_back = 0;            // types Loom hands to the MPI (it cannot read them)
  int64_t mpi_self_inconsistent = 0;  // the MPI's count pack contradicted its per-element pack
};

// "" when Loom agrees with the MPI; else what differs. `seed` varies the
// fill and the pack position. `has_op`: the description holds the
// constructor named in opt.inject.
std::string check(MPI_Datatype t, int count, uint64_t seed, bool has_op, const CheckOptions& opt,
                  CheckStats& stats);

// True when this build can use a GPU now.
bool gpu_usable();

}  // namespace loom::fuzz
