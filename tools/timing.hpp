// Small timing helpers shared by the tools: median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>
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

// Times a and b alternately, rep by rep, so that drift of the machine (other
// load, clocks) falls on both alike; returns their median seconds.
template <class A, class B>
std::pair<double, double> median_pair(A&& a, B&& b, int reps) {
  a();
  b();
  std::vector<double> ta(reps), tb(reps);
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    a();
    auto t1 = std::chrono::steady_clock::now();
    b();
    auto t2 = std::chrono::steady_clock::now();
    ta[i] = std::chrono::duration<double>(t1 - t0).count();
    tb[i] = std::chrono::duration<double>(t2 - t1).count();
  }
  std::nth_element(ta.begin(), ta.begin() + reps / 2, ta.end());
  std::nth_element(tb.begin(), tb.begin() + reps / 2, tb.end());
  return {ta[reps / 2], tb[reps / 2]};
}

// Repetitions so that one measurement of `est` seconds runs about `budget` in all.
inline int reps_for(double est, double budget = 0.05, int lo = 5, int hi = 2001) {
  int r = est > 0 ? static_cast<int>(budget / est) : hi;
  return std::clamp(r, lo, hi) | 1;
}

}  // namespace loom::tools
