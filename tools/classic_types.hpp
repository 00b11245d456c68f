// A catalogue of classic datatypes (halo faces, sub-arrays, columns, the
// HAND irregular case, particle structs), shared by loom-inspect and
// loom-bench so the demo and the benchmarks speak of the same types.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

namespace loom::tools {

struct ClassicType {
  std::string name;
  std::string family;                  // "2d", "3d", "irregular", "struct", "contiguous"
  std::function<MPI_Datatype()> make;  // returns a committed type; caller frees
  int count;                           // elements per message in the demo
};

std::vector<ClassicType> classic_types();

// A 2D object in the TEMPI style: `rows` blocks of `block` bytes, stride 2x block.
MPI_Datatype make_2d(int rows, int block);
// A 3D box of sub-sizes {nz, ny, nx} bytes-elements inside {NZ, NY, NX}, as subarray.
MPI_Datatype make_3d_box(int nz, int ny, int nx, int NZ, int NY, int NX);
// A struct nested four levels deep.
MPI_Datatype make_deep_struct();

}  // namespace loom::tools
