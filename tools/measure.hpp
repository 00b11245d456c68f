// loom-measure's shared pieces: what to measure (grids), how often (a
// repetition policy that stops once the median settles), and the two-rank
// context every measurement runs in. The terms themselves live in
// measure_local.cpp (one process: pack kernels, copies) and measure_mpi.cpp
// (both ranks: host MPI, CUDA IPC, Loom's own ping-pong).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/profile.hpp"

namespace loom::tools::measure {

// Sizes in bytes of each term's points.
struct Grid {
  std::vector<double> pack_sizes;  // packed bytes of the pack/unpack surfaces
  std::vector<double> blocks;      // block lengths of the surfaces
  std::vector<double> copy_sizes;  // d2h, h2d, host MPI
  std::vector<double> ipc_sizes;   // ipc_copy
  std::vector<double> loom_sizes;  // Loom ping-pong for the overhead scalars
  static Grid make(bool quick);
  double max_bytes() const;
};

// Repetition: after `warmup` untimed calls, batches of `batch` samples until
// the median of all samples moved less than `tol` over the last batch (after
// at least `min_batches`), or `max_samples`, or `max_seconds` for the point.
struct Reps {
  int warmup = 5;
  int batch = 10;
  int min_batches = 3;  // 30 samples at least: medians of a few moved by 10-20% run to run
  int max_samples = 100;
  double max_seconds = 0.25;
  double tol = 0.02;
  static Reps make(bool quick);
};

// One measured point: median microseconds, (p90 - p10) / median.
struct Stats {
  double usec = 0, spread = 0;
  int samples = 0;
};

// Collects samples and says when to stop.
class Samples {
 public:
  explicit Samples(const Reps& r) : r_(r), t0_(std::chrono::steady_clock::now()) {}
  void add(double usec) { v_.push_back(usec); }
  // Call after each batch: true when the point is done.
  bool done();
  Stats stats() const;

 private:
  Reps r_;
  std::chrono::steady_clock::time_point t0_;
  std::vector<double> v_;
  double last_median_ = -1;
  int batches_ = 0;
};

inline double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The two ranks and the machine: rank 0 measures local terms and writes
// the profile; rank 1 is its peer for everything MPI. (More ranks measure
// only the collectives, all of them together.)
struct Ctx {
  int rank = 0;
  int peer = 1;
  bool host_mode = false;    // no GPU: the host engine and memcpy stand in for it
  bool loom_device = false;  // Loom treats our buffers as device memory (GPU or test mode)
  bool on_node = true;       // both ranks share a node
  bool quick = false;
  bool quiet = false;  // no progress lines
  Grid grid;
  Reps reps;
};

// Local timing on the calling rank: op() after warm-up, repeated inside one
// sample when it is too short for the clock.
template <class Op>
Stats sample_local(const Reps& r, Op&& op) {
  for (int i = 0; i < r.warmup; ++i) op();
  double t = now_us();
  op();
  const double once = now_us() - t;
  constexpr double kMinSampleUs = 5;
  const int inner =
      once >= kMinSampleUs
          ? 1
          : std::clamp(static_cast<int>(std::ceil(kMinSampleUs / std::max(once, 0.01))), 1, 1000);
  Samples s(r);
  do {
    for (int b = 0; b < r.batch; ++b) {
      t = now_us();
      for (int i = 0; i < inner; ++i) op();
      s.add((now_us() - t) / inner);
    }
  } while (!s.done());
  return s.stats();
}

// Two-rank timing (or every rank's, for the collectives): all call op() in
// step; op returns rank 0's sample (microseconds). Rank 0 decides after each batch whether to go on
// and broadcasts it, so both ranks run the same number of iterations. The result is meaningful on
// rank 0 only.
template <class Op>
Stats sample_pair(const Ctx& c, Op&& op) {
  for (int i = 0; i < c.reps.warmup; ++i) op();
  Samples s(c.reps);
  int more = 1;
  while (more) {
    for (int b = 0; b < c.reps.batch; ++b) s.add(op());
    if (c.rank == 0) more = s.done() ? 0 : 1;
    PMPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  return s.stats();
}

// Rank 1 waits, without spinning a core, until rank 0 calls release_peer
// (rank 0's local measurements should not compete with a polling MPI).
void wait_for_peer(const Ctx& c);
void release_peer(const Ctx& c);

// Adds one point to a curve.
void append(model::Curve& curve, double bytes, const Stats& s);

// "1 KiB", "64 MiB", "8 B".
std::string size_str(double bytes);
// "1 KiB..64 MiB".
std::string range(const std::vector<double>& sizes);
// Rank 0: one progress line per term on stderr.
void progress(const Ctx& c, const std::string& term, const std::string& what, double t0_us);

// The terms. Each fills `p` on rank 0 (and is called on both ranks where
// it says so).
// Rank 0: pack_dev, unpack_dev, pack_host, unpack_host, d2h, h2d.
void measure_local(const Ctx& c, model::Profile& p);
// Both ranks: mpi_on_node or mpi_off_node, mpi_overhead, mpi_gap and the
// LogGOP fit.
void measure_host_mpi(const Ctx& c, model::Profile& p);
// Both ranks, on one node: ipc_copy.
void measure_ipc(const Ctx& c, model::Profile& p);
// Both ranks, on one node: overhead_* and scale_* of each method from
// Loom's own ping-pong against the model's summed terms.
void measure_loom_overheads(const Ctx& c, model::Profile& p);
// Every rank of the run (`ranks` of them, on one node): coll_node_* and
// coll_mirror_* of each call in model/coll_choice.hpp.
void measure_coll(const Ctx& c, int ranks, model::Profile& p);

}  // namespace loom::tools::measure
