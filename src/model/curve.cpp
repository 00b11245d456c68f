#include "model/curve.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Relative weight of a point; zero-time points borrow the smallest positive
// time so they neither dominate nor vanish.
double weight(double usec, double floor_us) {
  double y = usec > 0 ? usec : floor_us;
  return 1.0 / (y * y);
}

LinearFit fit_range(const Curve& c, size_t lo, size_t hi) {
  LinearFit f;
  if (lo >= hi) return f;
  double floor_us = 0;
  for (size_t i = lo; i < hi; ++i)
    if (c.usec[i] > 0 && (floor_us == 0 || c.usec[i] < floor_us)) floor_us = c.usec[i];
  if (floor_us == 0) floor_us = 1;  // all zero: any equal weights do
  // Centred sums: bytes span 1..1e10, raw normal equations would lose digits.
  double sw = 0, sx = 0, sy = 0;
  for (size_t i = lo; i < hi; ++i) {
    double w = weight(c.usec[i], floor_us);
    sw += w;
    sx += w * c.bytes[i];
    sy += w * c.usec[i];
  }
  double xm = sx / sw, ym = sy / sw;
  double sxx = 0, sxy = 0;
  for (size_t i = lo; i < hi; ++i) {
    double w = weight(c.usec[i], floor_us);
    double dx = c.bytes[i] - xm;
    sxx += w * dx * dx;
    sxy += w * dx * (c.usec[i] - ym);
  }
  f.b_us_per_byte = sxx > 0 ? sxy / sxx : 0;
  f.a_us = ym - f.b_us_per_byte * xm;
  for (size_t i = lo; i < hi; ++i) {
    if (c.usec[i] <= 0) continue;
    double pred = f.a_us + f.b_us_per_byte * c.bytes[i];
    f.max_rel_err = std::max(f.max_rel_err, std::fabs(pred - c.usec[i]) / c.usec[i]);
  }
  return f;
}

}  // namespace

double Curve::tail_slope() const {
  size_t n = bytes.size();
  if (n < 2) return 0;
  size_t lo = std::min(n / 2, n - 2);  // at least two points
  return std::max(0.0, fit_range(*this, lo, n).b_us_per_byte);
}

double Curve::at(double x) const {
  size_t n = bytes.size();
  if (n == 0) return kInf;
  if (!(x > bytes[0])) return usec[0];  // also NaN and x <= 0
  if (x >= bytes[n - 1]) return usec[n - 1] + (x - bytes[n - 1]) * tail_slope();
  // First point above x: x lies in [bytes[i-1], bytes[i]).
  size_t i = std::upper_bound(bytes.begin(), bytes.end(), x) - bytes.begin();
  double x0 = bytes[i - 1], x1 = bytes[i], y0 = usec[i - 1], y1 = usec[i];
  if (x == x0) return y0;  // exact at the points, no exp(log()) rounding
  if (y0 > 0 && y1 > 0) {
    double t = std::log(x / x0) / std::log(x1 / x0);
    return y0 * std::exp(t * std::log(y1 / y0));
  }
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

bool operator==(const Curve& a, const Curve& b) {
  return a.bytes == b.bytes && a.usec == b.usec && a.spread == b.spread;
}

LinearFit fit_linear(const Curve& c, double min_bytes) {
  size_t lo = std::lower_bound(c.bytes.begin(), c.bytes.end(), min_bytes) - c.bytes.begin();
  return fit_range(c, lo, c.bytes.size());
}

bool operator==(const LogGOP& a, const LogGOP& b) {
  return a.L == b.L && a.o == b.o && a.g == b.g && a.G == b.G && a.O == b.O;
}

bool fit_overhead_scale(const std::vector<double>& measured, const std::vector<double>& terms,
                        bool fit_scale, double* over, double* scale) {
  // With fit_scale the last point is the large size; the others are small.
  const size_t n = measured.size(), small = fit_scale ? n - 1 : n;
  if (n < (fit_scale ? 2u : 1u) || terms.size() != n) return false;
  for (double t : terms)
    if (!std::isfinite(t)) return false;
  double k = 1, o = 0;
  for (int round = 0; round < (fit_scale ? 3 : 1); ++round) {
    std::vector<double> rest;
    for (size_t i = 0; i < small; ++i) rest.push_back(measured[i] - k * terms[i]);
    std::sort(rest.begin(), rest.end());
    o = rest[rest.size() / 2];
    if (fit_scale && terms[n - 1] > 0)
      k = std::clamp((measured[n - 1] - o) / terms[n - 1], 0.25, 2.0);
  }
  *over = o;
  *scale = k;
  return std::isfinite(o) && std::isfinite(k);
}

LogGOP fit_loggop(const Curve& pingpong, const Curve& overhead, const Curve& gap) {
  LogGOP p;
  if (!overhead.empty()) {
    LinearFit f = fit_linear(overhead);  // a + b n = (o - O) + O n
    p.O = std::max(0.0, f.b_us_per_byte);
    p.o = std::max(0.0, f.a_us + f.b_us_per_byte);
  }
  if (!gap.empty()) {
    LinearFit f = fit_linear(gap);
    p.g = std::max(0.0, f.a_us + f.b_us_per_byte);
  }
  if (!pingpong.empty()) {
    LinearFit f = fit_linear(pingpong);  // slope G + 2O, value at 1 byte L + 2o
    p.G = std::max(0.0, f.b_us_per_byte - 2 * p.O);
    p.L = std::max(0.0, f.a_us + f.b_us_per_byte - 2 * p.o);
  }
  return p;
}

double loggop_time(const LogGOP& p, double bytes) {
  double extra = std::max(0.0, bytes - 1);
  return p.L + 2 * p.o + extra * (p.G + 2 * p.O);
}

bool Surface::empty() const {
  if (block.empty() || block.size() != by_block.size()) return true;
  for (const Curve& c : by_block)
    if (c.empty()) return true;
  return false;
}

double Surface::at(double block_bytes, double bytes) const {
  if (empty()) return kInf;
  size_t n = block.size();
  if (!(block_bytes > block[0])) return by_block[0].at(bytes);
  if (block_bytes >= block[n - 1]) return by_block[n - 1].at(bytes);
  size_t i = std::upper_bound(block.begin(), block.end(), block_bytes) - block.begin();
  double y0 = by_block[i - 1].at(bytes);
  if (block_bytes == block[i - 1]) return y0;
  double y1 = by_block[i].at(bytes);
  double t = std::log(block_bytes / block[i - 1]) / std::log(block[i] / block[i - 1]);
  return y0 + t * (y1 - y0);
}

bool operator==(const Surface& a, const Surface& b) {
  return a.block == b.block && a.by_block == b.by_block;
}

}  // namespace loom::model
