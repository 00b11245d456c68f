// loom-measure: grids, the repetition policy and small shared helpers.
#include "measure.hpp"

#include <time.h>

#include <cstdio>

namespace loom::tools::measure {
namespace {

constexpr int kTagRelease = 7100;

// lo, lo*step, ... up to hi, and hi itself when the steps miss it.
std::vector<double> geometric(double lo, double hi, double step) {
  std::vector<double> out;
  for (double v = lo; v <= hi; v *= step) out.push_back(v);
  if (out.empty() || out.back() < hi) out.push_back(hi);
  return out;
}

double percentile(const std::vector<double>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(at);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (at - static_cast<double>(i)) * (sorted[i + 1] - sorted[i]);
}

}  // namespace

Grid Grid::make(bool quick) {
  constexpr double KiB = 1024, MiB = 1024 * 1024;
  Grid g;
  if (quick) {
    g.pack_sizes = geometric(KiB, MiB, 16);
    g.blocks = {1, 16, 256, 4096, 65536};
    g.copy_sizes = geometric(1, MiB, 16);
    g.ipc_sizes = geometric(KiB, MiB, 16);
  } else {
    g.pack_sizes = geometric(KiB, 64 * MiB, 4);
    g.blocks = {1, 4, 16, 64, 256, 1024, 4096, 65536};
    g.copy_sizes = geometric(1, 64 * MiB, 4);
    g.ipc_sizes = geometric(KiB, 64 * MiB, 4);
  }
  // Where the methods' fixed costs show and the model's choice is closest.
  g.loom_sizes = quick ? std::vector<double>{4 * KiB, 64 * KiB, MiB}
                       : std::vector<double>{KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB};
  return g;
}

double Grid::max_bytes() const {
  double m = 0;
  for (const auto* v : {&pack_sizes, &copy_sizes, &ipc_sizes, &loom_sizes})
    for (double x : *v) m = std::max(m, x);
  return m;
}

Reps Reps::make(bool quick) {
  Reps r;
  if (quick) {
    r.warmup = 1;
    r.batch = 3;
    r.min_batches = 1;
    r.max_samples = 9;
    r.max_seconds = 0.02;
  }
  return r;
}

bool Samples::done() {
  ++batches_;
  std::vector<double> s = v_;
  std::sort(s.begin(), s.end());
  const double m = percentile(s, 0.5);
  const bool settled = last_median_ >= 0 && std::fabs(m - last_median_) <= r_.tol * last_median_;
  last_median_ = m;
  if (static_cast<int>(v_.size()) >= r_.max_samples) return true;
  const double spent =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  if (spent >= r_.max_seconds) return true;
  return batches_ >= r_.min_batches && (settled || r_.min_batches == 1);
}

Stats Samples::stats() const {
  Stats st;
  if (v_.empty()) return st;
  std::vector<double> s = v_;
  std::sort(s.begin(), s.end());
  st.usec = percentile(s, 0.5);
  st.spread = st.usec > 0 ? (percentile(s, 0.9) - percentile(s, 0.1)) / st.usec : 0;
  st.samples = static_cast<int>(s.size());
  return st;
}

void wait_for_peer(const Ctx& c) {
  MPI_Request r;
  PMPI_Irecv(nullptr, 0, MPI_BYTE, c.peer, kTagRelease, MPI_COMM_WORLD, &r);
  int flag = 0;
  while (!flag) {
    PMPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (!flag) {
      timespec ts{0, 200 * 1000};
      nanosleep(&ts, nullptr);
    }
  }
}

void release_peer(const Ctx& c) {
  PMPI_Send(nullptr, 0, MPI_BYTE, c.peer, kTagRelease, MPI_COMM_WORLD);
}

void append(model::Curve& curve, double bytes, const Stats& s) {
  curve.bytes.push_back(bytes);
  curve.usec.push_back(s.usec);
  curve.spread.push_back(s.spread);
}

std::string size_str(double bytes) {
  char b[32];
  const auto n = static_cast<long long>(bytes);
  if (n >= (1ll << 20) && n % (1ll << 20) == 0)
    std::snprintf(b, sizeof b, "%lld MiB", n >> 20);
  else if (n >= 1024 && n % 1024 == 0)
    std::snprintf(b, sizeof b, "%lld KiB", n >> 10);
  else
    std::snprintf(b, sizeof b, "%lld B", n);
  return b;
}

std::string range(const std::vector<double>& sizes) {
  return size_str(sizes.front()) + ".." + size_str(sizes.back());
}

void progress(const Ctx& c, const std::string& term, const std::string& what, double t0_us) {
  if (c.rank != 0 || c.quiet) return;
  std::fprintf(stderr, "loom-measure: %-16s %-52s %7.2f s\n", term.c_str(), what.c_str(),
               (now_us() - t0_us) * 1e-6);
  std::fflush(stderr);
}

}  // namespace loom::tools::measure
