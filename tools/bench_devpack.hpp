// loom-bench devpack: MPI_Pack and MPI_Unpack with both buffers in device
// memory, each call timed to its return as TEMPI's bench-mpi-pack times it,
// on TEMPI's shapes (blocks of B bytes every 512 bytes, 1 and 4 MiB
// packed); tools/peers/torch_pack.py times PyTorch on the same shapes.
#pragma once

namespace loom::tools {
int bench_devpack(bool quick);
}  // namespace loom::tools
