// loom-bench coll (bench_coll.cpp): needs a CUDA build; any number of ranks.
#pragma once

namespace loom::tools {
// csv_path: also write the rows there (rank 0), or null.
// `nonblocking_only`: only the MPI_I... rows (loom-bench coll --nonblocking).
int bench_coll(bool quick, const char* csv_path, bool nonblocking_only = false);
}  // namespace loom::tools
