// loom-halo: a 3D halo-exchange mini-app on device buffers (docs/halo.md).
// Each rank holds an nx x ny x nz block of a periodic grid of doubles, q
// quantities, with a halo of radius r, and swaps faces, edges and corners
// with its 26 neighbours, described by MPI_Type_create_subarray on the
// device buffer. Every mode of one run is timed (median over iterations of
// the slowest rank) and verified (every cell checked after the exchanges):
//   loom      Isend/Irecv/Waitall of the subarray types on the device grid,
//             one message per neighbour and quantity, through Loom, once for
//             each method of --methods (loom_set_method)
//   loom4d    Isend/Irecv/Waitall, one message per neighbour: {q, z, y, x}
//             subarray types (all quantities, as hand and neighbor send
//             them), through Loom as it stands (auto unless LOOM_METHOD)
//   naive     the whole grid copied to host memory, the same exchange there,
//             copied back
//   hand      the app's own pack kernel (all boxes, one launch) into one
//             contiguous device buffer, one contiguous message per neighbour
//             (through Loom too), one unpack launch
//   neighbor  one MPI_Neighbor_alltoallw on a 26-neighbour graph, {q, z, y, x}
//             subarray types on the device grid
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "cli.hpp"
#include "halo_device.hpp"
#include "halo_grid.hpp"
#include "loom/loom.h"

namespace loom::halo {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "loom-halo: %s\n", what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

namespace {

constexpr int kSkip = 77;  // no device to run on (ctest's skip code)

struct Options {
  int n[3] = {64, 64, 32};
  int q = 8;
  int r = 3;
  int iters = 20;
  int warmup = 2;
  bool pitched = true;
  std::vector<std::string> modes = {"loom", "loom4d", "naive", "hand", "neighbor"};
  std::vector<std::string> methods = {"auto", "device", "oneshot", "staged"};
  std::string csv;
  bool corrupt = false;
  bool quiet = false;
};

const char* kUsage =
    "usage: mpirun -np N loom-halo [options]\n"
    "  --nx N --ny N --nz N   interior cells per rank (64 64 32)\n"
    "  --q N                  quantities (8)\n"
    "  --r N                  halo radius, 1..min(nx, ny, nz) (3)\n"
    "  --iters N              timed exchanges per mode (20), after --warmup N (2)\n"
    "  --modes LIST           of loom,loom4d,naive,hand,neighbor (all)\n"
    "  --methods LIST         Loom methods of mode loom: auto,device,oneshot,staged (all),\n"
    "                         as-is (as LOOM_METHOD left it; also under LOOM_DISABLE=1)\n"
    "  --alloc 3d|linear      cudaMalloc3D (pitched rows) or cudaMalloc (3d)\n"
    "  --csv FILE             also write the rows to FILE (rank 0)\n"
    "  --corrupt              test the verifier: change one halo cell after each mode;\n"
    "                         passes only if every mode reports exactly that cell\n"
    "  --quiet                no progress lines on stderr (one a mode otherwise)\n"
    "  -h, --help             this text\n"
    "Prints a Markdown table: time per exchange of each mode, its speed-up over naive\n"
    "staging and its time over the hand-packed reference; exits 1 if a halo is wrong.\n"
    "Without a GPU: LOOM_TEST_HOST_AS_DEVICE=1 (host memory taken for device memory).\n"
    "examples:\n"
    "  mpirun -np 2 loom-halo --nx 128 --ny 128 --nz 128 --q 4 --r 2 --csv halo.csv\n"
    "  LOOM_TEST_HOST_AS_DEVICE=1 mpirun -np 4 loom-halo --iters 5 --methods auto\n";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// Parses argv into o (before MPI_Init); on a bad argument returns its
// message, "" when fine.
std::string parse(int argc, char** argv, Options& o) {
  auto number = [](const char* s, int lo, int& out) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > (1 << 30)) return false;
    out = static_cast<int>(v);
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--corrupt" || a == "--quiet") {
      (a == "--corrupt" ? o.corrupt : o.quiet) = true;
      continue;
    }
    static const char* const kValued[] = {"--nx",      "--ny",    "--nz",     "--q",
                                          "--r",       "--iters", "--warmup", "--modes",
                                          "--methods", "--alloc", "--csv"};
    if (std::none_of(std::begin(kValued), std::end(kValued), [&](const char* k) { return a == k; }))
      return "unknown option " + a;
    if (i + 1 >= argc) return a + " needs a value";
    const char* v = argv[++i];
    bool ok = true;
    if (a == "--nx") {
      ok = number(v, 1, o.n[0]);
    } else if (a == "--ny") {
      ok = number(v, 1, o.n[1]);
    } else if (a == "--nz") {
      ok = number(v, 1, o.n[2]);
    } else if (a == "--q") {
      ok = number(v, 1, o.q);
    } else if (a == "--r") {
      ok = number(v, 1, o.r);
    } else if (a == "--iters") {
      ok = number(v, 1, o.iters);
    } else if (a == "--warmup") {
      ok = number(v, 0, o.warmup);
    } else if (a == "--modes") {
      o.modes = split(v);
      for (const std::string& m : o.modes)
        if (m != "loom" && m != "loom4d" && m != "naive" && m != "hand" && m != "neighbor")
          return "unknown mode '" + m + "'";
    } else if (a == "--methods") {
      o.methods = split(v);
      for (const std::string& m : o.methods)
        if (m != "auto" && m != "device" && m != "oneshot" && m != "staged" && m != "as-is")
          return "unknown method '" + m + "'";
    } else if (a == "--alloc") {
      ok = std::strcmp(v, "3d") == 0 || std::strcmp(v, "linear") == 0;
      o.pitched = std::strcmp(v, "3d") == 0;
    } else if (a == "--csv") {
      o.csv = v;
    } else {
      return "unknown option " + a;
    }
    if (!ok) return "bad value '" + std::string(v) + "' for " + a;
  }
  if (o.r > std::min({o.n[0], o.n[1], o.n[2]}))
    return "the halo radius must not exceed the block (r <= nx, ny, nz)";
  if (o.modes.empty()) return "no modes";
  return "";
}

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  const std::string s = v;
  return s == "1" || s == "y" || s == "yes" || s == "true" || s == "on";
}

#ifdef LOOM_HAVE_CUDA
// The launcher's node-local rank, before MPI_Init; -1 when none says.
int local_rank_from_env() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}
#endif

// A subarray of the grid: box b of one quantity (3D), or of all (4D, q first).
MPI_Datatype box_type(const Geom& g, const Box& b, bool all_quantities) {
  int sizes[4], sub[4], starts[4], nd = 0;
  if (all_quantities) {
    sizes[0] = sub[0] = g.q;
    starts[0] = 0;
    nd = 1;
  }
  const int64_t extent[3] = {g.pitch, g.ext(1), g.ext(2)};
  for (int a = 2; a >= 0; --a, ++nd) {  // C order: z, y, x
    sizes[nd] = static_cast<int>(extent[a]);
    sub[nd] = b.len[a];
    starts[nd] = b.lo[a];
  }
  MPI_Datatype t;
  MPI_Type_create_subarray(nd, sizes, sub, starts, MPI_ORDER_C, MPI_DOUBLE, &t);
  MPI_Type_commit(&t);
  return t;
}

struct Row {
  std::string mode;  // loom, naive, hand, neighbor
  std::string method;
  double seconds = 0;  // < 0: not run
  bool verified = false;
  std::string note;
};

class Halo {
 public:
  Halo(const Options& o, Device& dev) : o_(o), dev_(dev) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    int periods[3] = {1, 1, 1};
    MPI_Dims_create(size_, 3, dims_);
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims_, periods, 0, &cart_);
    int crank;
    MPI_Comm_rank(cart_, &crank);
    MPI_Cart_coords(cart_, crank, 3, place_.c);
    for (int a = 0; a < 3; ++a) {
      g_.n[a] = o.n[a];
      place_.global[a] = int64_t{dims_[a]} * o.n[a];
    }
    g_.q = o.q;
    g_.r = o.r;
    for (int k = 0; k < kDirections; ++k) {
      int d[3], c[3];
      direction(k, d);
      for (int a = 0; a < 3; ++a) c[a] = ((place_.c[a] + d[a]) % dims_[a] + dims_[a]) % dims_[a];
      MPI_Cart_rank(cart_, c, &nbr_[k]);
    }
    grid_ = dev_.alloc_grid(g_, o.pitched);
    for (int k = 0; k < kDirections; ++k) {
      send3_[k] = box_type(g_, send_box(g_, k), false);
      recv3_[k] = box_type(g_, halo_box(g_, k), false);
      send4_[k] = box_type(g_, send_box(g_, k), true);
      recv4_[k] = box_type(g_, halo_box(g_, k), true);
    }
    send_seg_ = make_segments(g_, true);
    recv_seg_ = make_segments(g_, false);
    // Graph for the neighbour collective: block k goes to the neighbour in
    // direction k and comes from the one opposite, whose box of direction k
    // fills the halo on the opposite side. Where one rank is several
    // neighbours (few ranks on an axis), messages between a pair keep their
    // order, so the k-th of them matches the k-th.
    int sources[kDirections], dests[kDirections];
    for (int k = 0; k < kDirections; ++k) {
      dests[k] = nbr_[k];
      sources[k] = nbr_[opposite(k)];
      nrecv_[k] = recv4_[opposite(k)];
    }
    MPI_Dist_graph_create_adjacent(cart_, kDirections, sources, MPI_UNWEIGHTED, kDirections, dests,
                                   MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &graph_);
    // Ranks of this node on the same device.
    MPI_Comm node, same;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_split(node, dev_.ordinal(), 0, &same);
    MPI_Comm_size(same, &per_device_);
    int most = per_device_;
    MPI_Allreduce(&most, &per_device_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Comm_free(&same);
    MPI_Comm_free(&node);
  }

  ~Halo() {
    for (MPI_Datatype* v : {send3_, recv3_, send4_, recv4_})
      for (int k = 0; k < kDirections; ++k) MPI_Type_free(&v[k]);
    for (void* p : {static_cast<void*>(hand_send_), static_cast<void*>(hand_recv_)})
      if (p) dev_.release(p);
    if (host_) dev_.release_host(host_, grid_bytes());
    dev_.release(grid_);
    MPI_Comm_free(&graph_);
    MPI_Comm_free(&cart_);
  }

  int rank() const { return rank_; }
  size_t grid_bytes() const { return static_cast<size_t>(g_.total()) * sizeof(double); }
  // Bytes each rank sends (and receives) per exchange.
  size_t halo_bytes() const { return static_cast<size_t>(send_seg_.offset[kDirections]) * 8; }

  void header(const std::string& device) const {
    if (rank_ != 0) return;
    std::printf(
        "loom-halo: %d ranks as %dx%dx%d, %dx%dx%d cells per rank, q=%d, r=%d, %s rows "
        "(pitch %lld B); %s, %d rank%s per device\n"
        "per rank and exchange: %.1f KiB to 26 neighbours; %d iterations after %d warm-up\n",
        size_, dims_[0], dims_[1], dims_[2], g_.n[0], g_.n[1], g_.n[2], g_.q, g_.r,
        o_.pitched ? "cudaMalloc3D" : "linear", static_cast<long long>(g_.pitch * 8),
        device.c_str(), per_device_, per_device_ == 1 ? "" : "s", halo_bytes() / 1024.0, o_.iters,
        o_.warmup);
    std::fflush(stdout);
  }

  // One mode: fill, warm up, time, verify; sets the row's time and verdict.
  void run(Row& row, const std::function<void()>& step) {
    dev_.fill(grid_, g_, place_);
    for (int i = 0; i < o_.warmup; ++i) step();
    std::vector<double> t;
    for (int i = 0; i < o_.iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto a = std::chrono::steady_clock::now();
      step();
      double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      double all = 0;
      MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t.push_back(all);
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    row.seconds = t[t.size() / 2];
    row.verified = check(row);
  }

  void p2p(double* base) {
    reqs_.clear();
    reqs_.reserve(2 * kDirections * g_.q);
    for (int qi = 0; qi < g_.q; ++qi)
      for (int k = 0; k < kDirections; ++k) {
        reqs_.emplace_back();
        MPI_Irecv(base + qi * g_.quantity(), 1, recv3_[k], nbr_[k], opposite(k) * g_.q + qi, cart_,
                  &reqs_.back());
      }
    for (int qi = 0; qi < g_.q; ++qi)
      for (int k = 0; k < kDirections; ++k) {
        reqs_.emplace_back();
        MPI_Isend(base + qi * g_.quantity(), 1, send3_[k], nbr_[k], k * g_.q + qi, cart_,
                  &reqs_.back());
      }
    MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
  }
  void loom_step() { p2p(grid_); }
  // One message per neighbour, all quantities in one {q, z, y, x} subarray.
  void loom4d_step() {
    reqs_.assign(2 * kDirections, MPI_REQUEST_NULL);
    for (int k = 0; k < kDirections; ++k)
      MPI_Irecv(grid_, 1, recv4_[k], nbr_[k], opposite(k), cart_, &reqs_[k]);
    for (int k = 0; k < kDirections; ++k)
      MPI_Isend(grid_, 1, send4_[k], nbr_[k], k, cart_, &reqs_[kDirections + k]);
    MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
  }
  void naive_step() {
    if (!host_) host_ = static_cast<double*>(dev_.alloc_host(grid_bytes()));
    dev_.to_host(host_, grid_, grid_bytes());
    p2p(host_);
    dev_.to_device(grid_, host_, grid_bytes());
  }
  void hand_step() {
    const size_t bytes = halo_bytes();
    if (!hand_send_) {
      hand_send_ = static_cast<double*>(dev_.alloc(bytes));
      hand_recv_ = static_cast<double*>(dev_.alloc(bytes));
    }
    dev_.pack(grid_, g_, send_seg_, hand_send_);
    reqs_.assign(2 * kDirections, MPI_REQUEST_NULL);
    for (int k = 0; k < kDirections; ++k) {
      const int64_t at = recv_seg_.offset[k], n = recv_seg_.offset[k + 1] - at;
      MPI_Irecv(hand_recv_ + at, static_cast<int>(n), MPI_DOUBLE, nbr_[k], opposite(k), cart_,
                &reqs_[k]);
    }
    for (int k = 0; k < kDirections; ++k) {
      const int64_t at = send_seg_.offset[k], n = send_seg_.offset[k + 1] - at;
      MPI_Isend(hand_send_ + at, static_cast<int>(n), MPI_DOUBLE, nbr_[k], k, cart_,
                &reqs_[kDirections + k]);
    }
    MPI_Waitall(2 * kDirections, reqs_.data(), MPI_STATUSES_IGNORE);
    dev_.unpack(hand_recv_, g_, recv_seg_, grid_);
  }
  void neighbor_step() {
    static const std::vector<int> ones(kDirections, 1);
    static const std::vector<MPI_Aint> zeros(kDirections, 0);
    MPI_Neighbor_alltoallw(grid_, ones.data(), zeros.data(), send4_, grid_, ones.data(),
                           zeros.data(), nrecv_, graph_);
  }

 private:
  // Verifies the grid on every rank; with --corrupt, first changes one halo
  // cell on rank 0 and then requires exactly that one to be reported.
  bool check(Row& row) {
    int64_t planted = -1;
    if (o_.corrupt && rank_ == 0) {
      const Box b = halo_box(g_, 0);
      planted = g_.at(g_.q - 1, b.lo[0], b.lo[1], b.lo[2]);
      const double bad = -3.0;
      dev_.to_device(grid_ + planted, &bad, sizeof bad);
    }
    const Verdict v = dev_.verify(grid_, g_, place_);
    if (v.wrong > 0 && !(o_.corrupt && v.wrong == 1 && v.first == planted)) {
      const Cell c = cell_of(g_, v.first);
      std::fprintf(stderr,
                   "loom-halo: rank %d, mode %s%s%s: %lld wrong cells; first: quantity %d at "
                   "(x %lld, y %lld, z %lld) holds %.17g, expected %.17g\n",
                   rank_, row.mode.c_str(), row.method.empty() ? "" : " ", row.method.c_str(),
                   static_cast<long long>(v.wrong), c.qi, static_cast<long long>(c.x),
                   static_cast<long long>(c.y), static_cast<long long>(c.z), v.got, v.want);
    }
    long long wrong = v.wrong, all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (!o_.corrupt) return all == 0;
    int caught = rank_ != 0 || (v.wrong == 1 && v.first == planted), every = 0;
    MPI_Allreduce(&caught, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!every || all != 1) row.note = "the corrupted cell was not reported alone";
    return every && all == 1;
  }

  const Options& o_;
  Device& dev_;
  int rank_ = 0, size_ = 1, dims_[3] = {0, 0, 0}, per_device_ = 1;
  MPI_Comm cart_ = MPI_COMM_NULL, graph_ = MPI_COMM_NULL;
  Geom g_;
  Place place_;
  int nbr_[kDirections];
  MPI_Datatype send3_[kDirections], recv3_[kDirections], send4_[kDirections], recv4_[kDirections],
      nrecv_[kDirections];
  Segments send_seg_, recv_seg_;
  double* grid_ = nullptr;
  double* host_ = nullptr;
  double* hand_send_ = nullptr;
  double* hand_recv_ = nullptr;
  std::vector<MPI_Request> reqs_;
};

std::string label(const Row& r) {
  return r.method.empty() ? r.mode : r.mode + " " + r.method;
}

void report(const std::vector<Row>& rows, const Halo& h, const Options& o, int size,
            const std::string& device) {
  if (h.rank() != 0) return;
  double naive = 0, hand = 0;
  for (const Row& r : rows) {
    if (r.mode == "naive" && r.seconds > 0) naive = r.seconds;
    if (r.mode == "hand" && r.seconds > 0) hand = r.seconds;
  }
  std::printf(
      "\n| mode | messages / rank | us / exchange | GB/s per rank | naive / this | this / hand | "
      "verified |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
  FILE* csv = nullptr;
  if (!o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (!csv) std::fprintf(stderr, "loom-halo: cannot write %s\n", o.csv.c_str());
  }
  if (csv)
    std::fprintf(csv,
                 "ranks,nx,ny,nz,q,r,alloc,device,mode,method,us_per_exchange,halo_bytes_per_"
                 "rank,naive_over_this,this_over_hand,verified,messages_per_rank\n");
  for (const Row& r : rows) {
    // Sends per rank and exchange: one per neighbour (and quantity).
    const int messages = r.mode == "loom" || r.mode == "naive" ? kDirections * o.q : kDirections;
    if (r.seconds < 0) {
      std::printf("| %s | %d | - | - | - | - | %s |\n", label(r).c_str(), messages, r.note.c_str());
      continue;
    }
    const double us = r.seconds * 1e6;
    const double vs_naive = naive > 0 ? naive / r.seconds : 0;
    const double vs_hand = hand > 0 ? r.seconds / hand : 0;
    char a[32] = "-", b[32] = "-";
    if (vs_naive > 0) std::snprintf(a, sizeof a, "%.2fx", vs_naive);
    if (vs_hand > 0) std::snprintf(b, sizeof b, "%.2fx", vs_hand);
    std::printf("| %s | %d | %.1f | %.2f | %s | %s | %s |\n", label(r).c_str(), messages, us,
                static_cast<double>(h.halo_bytes()) / r.seconds / 1e9, a, b,
                r.verified ? "yes" : ("FAILED " + r.note).c_str());
    if (csv)
      std::fprintf(csv, "%d,%d,%d,%d,%d,%d,%s,\"%s\",%s,%s,%.3f,%zu,%.4f,%.4f,%d,%d\n", size,
                   o.n[0], o.n[1], o.n[2], o.q, o.r, o.pitched ? "3d" : "linear", device.c_str(),
                   r.mode.c_str(), r.method.c_str(), us, h.halo_bytes(), vs_naive, vs_hand,
                   r.verified ? 1 : 0, messages);
  }
  if (csv) std::fclose(csv);
  std::fflush(stdout);
}

int run(const Options& o) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tools::cli::enable_progress(rank == 0 && !o.quiet);

  // The device: host memory in Loom's test mode, else this rank's GPU.
  std::unique_ptr<Device> dev;
  std::string why = "this build has no CUDA";
  int local = 0;
  {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
  }
  if (env_true("LOOM_TEST_HOST_AS_DEVICE")) {
    dev = make_host_device();
  } else {
#ifdef LOOM_HAVE_CUDA
    dev = make_cuda_device(local, &why);
#endif
  }
  int have = dev != nullptr, all = 0;
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (rank == 0)
      std::fprintf(stderr,
                   "loom-halo: no device (%s); without a GPU run with "
                   "LOOM_TEST_HOST_AS_DEVICE=1\n",
                   dev ? "another rank has none" : why.c_str());
    return kSkip;
  }
  const std::string device = dev->name();

  std::vector<Row> rows;
  {
    Halo h(o, *dev);
    h.header(device);
    const char* env_method = std::getenv("LOOM_METHOD");
    for (const std::string& mode : o.modes) {
      if (mode != "loom") {
        Row row{mode, "", -1, false, ""};
        tools::cli::progress("loom-halo", "mode %s", mode.c_str());
        if (mode == "loom4d") h.run(row, [&] { h.loom4d_step(); });
        if (mode == "naive") h.run(row, [&] { h.naive_step(); });
        if (mode == "hand") h.run(row, [&] { h.hand_step(); });
        if (mode == "neighbor") h.run(row, [&] { h.neighbor_step(); });
        rows.push_back(row);
        continue;
      }
      const char* start_method = env_method ? env_method : "auto";
      for (const std::string& m : o.methods) {
        Row row{mode, m, -1, false, ""};
        // Every rank must take the method, or none does. as-is: the
        // start-up method, or no Loom at all (LOOM_DISABLE=1: the MPI alone).
        int refused = 0, any = 0;
        if (m == "as-is")
          (void)loom_set_method(start_method);
        else
          refused = loom_set_method(m.c_str()) != MPI_SUCCESS;
        MPI_Allreduce(&refused, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any) {
          row.note = "unavailable";
        } else {
          tools::cli::progress("loom-halo", "mode loom, method %s", m.c_str());
          h.run(row, [&] { h.loom_step(); });
        }
        rows.push_back(row);
      }
      (void)loom_set_method(start_method);
    }
    report(rows, h, o, size, device);
  }
  bool ok = true;
  for (const Row& r : rows) ok = ok && (r.seconds < 0 || r.verified);
  if (rank == 0) {
    if (o.corrupt)
      std::printf(ok ? "loom-halo: every mode reported the corrupted cell\n"
                     : "loom-halo: verifier check FAILED\n");
    else
      std::printf(ok ? "loom-halo: every halo verified\n" : "loom-halo: verification FAILED\n");
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace loom::halo

int main(int argc, char** argv) {
  namespace cli = loom::tools::cli;
  if (cli::help_asked(argc, argv)) return cli::print_help(loom::halo::kUsage);
  loom::halo::Options o;
  if (const std::string bad = loom::halo::parse(argc, argv, o); !bad.empty())
    return cli::usage_error("loom-halo", bad);
    // Pick the GPU before MPI_Init where the launcher tells the local rank,
    // so that anything started at MPI_Init lives on it; run() picks again
    // from the communicator (same answer) where none does.
#ifdef LOOM_HAVE_CUDA
  const int local = loom::halo::local_rank_from_env();
  if (local >= 0 && !loom::halo::env_true("LOOM_TEST_HOST_AS_DEVICE"))
    loom::halo::select_cuda_device(local);
#endif
  MPI_Init(&argc, &argv);
  const int rc = loom::halo::run(o);
  MPI_Finalize();
  return rc;
}
