// loom-bench pingpong (bench_pingpong.cpp): needs a CUDA build and 2 ranks.
#pragma once

namespace loom::tools {
int bench_pingpong(bool quick);
}
