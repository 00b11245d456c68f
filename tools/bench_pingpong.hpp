// loom-bench pingpong (bench_pingpong.cpp): needs a CUDA build and 2 ranks.
#pragma once

namespace loom::tools {
// csv_path: also write each (case, method) time with the model's prediction
// there (rank 0; null: none): case,bytes,method,measured_us,predicted_us.
int bench_pingpong(bool quick, const char* csv_path = nullptr);
}  // namespace loom::tools
