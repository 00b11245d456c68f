// loom-bench coll (bench_coll.cpp): needs a CUDA build; any number of ranks.
#pragma once

#include <cstddef>

namespace loom::tools {
// csv_path: also write the rows there (rank 0), or null.
// `nonblocking_only`: only the MPI_I... rows (loom-bench coll --nonblocking).
// `from`: only sizes of at least this many bytes a rank (0: all).
// `second`: the engine the "node" column forces (LOOM_COLL_METHOD's names;
// `staged` off the node, where the node engine cannot run).
int bench_coll(bool quick, const char* csv_path, bool nonblocking_only = false,
               std::size_t from = 0, const char* second = "node");
}  // namespace loom::tools
