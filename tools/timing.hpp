// Small timing helpers shared by the tools: median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace loom::tools {

// Runs fn `reps` times (after one warm-up) and returns the median seconds.
template <class F>
double median_seconds(F&& fn, int reps) {
  fn();
  std::vector<double> t(reps);
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    fn();
    auto b = std::chrono::steady_clock::now();
    t[i] = std::chrono::duration<double>(b - a).count();
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

// Repetitions so that one measurement of `est` seconds runs about `budget` in all.
inline int reps_for(double est, double budget = 0.05, int lo = 5, int hi = 2001) {
  int r = est > 0 ? static_cast<int>(budget / est) : hi;
  return std::clamp(r, lo, hi) | 1;
}

}  // namespace loom::tools
