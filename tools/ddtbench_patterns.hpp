// The communication patterns of DDTBench (Schneider, Gerstenberger and
// Hoefler, EuroMPI 2012), the suite the HAND paper measures: the data one
// rank of MILC, NAS LU, NAS MG, WRF, SPECFEM3D_GLOBE, LAMMPS and a 2D FFT
// sends to a neighbour, each as the MPI derived datatype those codes (or
// the suite) build for it. Written from the papers' descriptions; the sizes
// are parameters (the suite's own are small; ours reach past 1 MiB).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace loom::ddt {

struct Pattern {
  std::string name;                       // as DDTBench names it, e.g. "nas_lu_x"
  std::string what;                       // the data, in one line
  MPI_Datatype type = MPI_DATATYPE_NULL;  // committed; one element is the message
  size_t span = 0;                        // bytes of the buffer the element lies in (true lb >= 0)
};

// Every pattern, sized by `scale` (1: the default sizes, about 1 MiB packed;
// smaller for quick runs and tests). `only`: names to keep (empty: all).
std::vector<Pattern> make_patterns(double scale, const std::vector<std::string>& only);
void free_patterns(std::vector<Pattern>& patterns);
// Every pattern's name, in order.
std::vector<std::string> pattern_names();

}  // namespace loom::ddt
