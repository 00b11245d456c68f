// Measured terms of the performance model (time against message size) and the
// fits made from them. MPI-free and CUDA-free; see DESIGN.md, idea 3.
#pragma once

#include <vector>

namespace loom::model {

// One measured term: time in microseconds against message bytes. Points sorted
// by bytes (strictly increasing), bytes > 0, usec >= 0 (medians of repeated
// measurements). spread is the relative spread (e.g. (p90-p10)/median) of each
// point, kept for reports; it may be left empty (read back as zeros).
struct Curve {
  std::vector<double> bytes, usec, spread;

  bool empty() const { return bytes.empty(); }
  // Time at `bytes`: piecewise linear in log(bytes)-log(usec) between points
  // (linear where a point is 0 us); below the first point the first point's
  // time (a latency floor); above the last point the last time plus the
  // per-byte slope of the linear fit of the upper half of the points (>= 0).
  // +infinity for an empty curve: a missing term makes its users unusable.
  double at(double bytes) const;
  // The per-byte slope used above the last point.
  double tail_slope() const;
};

bool operator==(const Curve& a, const Curve& b);
inline bool operator!=(const Curve& a, const Curve& b) {
  return !(a == b);
}

struct LinearFit {
  double a_us = 0, b_us_per_byte = 0;
  double max_rel_err = 0;  // over the fitted points with usec > 0
};

// Least squares usec ~ a + b*bytes with relative weights (1/usec^2) so small
// sizes count as much as large ones, over the points with bytes >= min_bytes.
// One point gives b = 0; no point gives all zeros.
LinearFit fit_linear(const Curve& c, double min_bytes = 0);

// A method's fixed cost and scale: measured ~ over + scale * terms, where
// `terms` is the model's sum for each point. With fit_scale, over is the
// median over all points but the last (small sizes) and scale fits the last
// (a large size), clamped to [0.25, 2], refined together in three rounds;
// without, scale is 1 and over the median over all points. False when a
// term is not finite or there are too few points (2 with fit_scale, else 1).
bool fit_overhead_scale(const std::vector<double>& measured, const std::vector<double>& terms,
                        bool fit_scale, double* over, double* scale);

// LogGOP parameters (latency L, per-message CPU overhead o, gap between
// messages g, per-byte gap G, per-byte overhead O). Units us and us/byte.
struct LogGOP {
  double L = 0, o = 0, g = 0, G = 0, O = 0;
};

bool operator==(const LogGOP& a, const LogGOP& b);
inline bool operator!=(const LogGOP& a, const LogGOP& b) {
  return !(a == b);
}

// The formulas, for an n-byte message (n < 1 counts as 1):
//   sender's call time      overhead(n) = o + (n-1) O
//   period of a stream      gap(n)      = g + (n-1) G
//   one-way time            pingpong(n) = L + 2o + (n-1) (G + 2O)
// fit_loggop inverts them from linear fits: O, o from `overhead`; g from the
// fit of `gap` at n = 1; G = pingpong slope - 2O and L = pingpong(1) - 2o,
// both clamped >= 0. Empty curves leave their parameters 0. A linear
// pingpong truth is reproduced exactly by loggop_time (unless clamped).
LogGOP fit_loggop(const Curve& pingpong, const Curve& overhead, const Curve& gap);
double loggop_time(const LogGOP& p, double bytes);

// A term that also depends on the block length of the layout (pack and unpack
// kernels): one Curve per measured block length (bytes), sorted ascending.
struct Surface {
  std::vector<double> block;
  std::vector<Curve> by_block;

  // Also true when malformed (sizes differ or a curve is empty).
  bool empty() const;
  // Linear in log(block) between the two neighbouring curves' at(bytes),
  // clamped to the first/last block outside the range. +infinity if empty().
  double at(double block_bytes, double bytes) const;
};

bool operator==(const Surface& a, const Surface& b);
inline bool operator!=(const Surface& a, const Surface& b) {
  return !(a == b);
}

}  // namespace loom::model
