// loom-bench coll (bench_coll.cpp): needs a CUDA build; any number of ranks.
#pragma once

namespace loom::tools {
// csv_path: also write the rows there (rank 0), or null.
int bench_coll(bool quick, const char* csv_path);
}  // namespace loom::tools
