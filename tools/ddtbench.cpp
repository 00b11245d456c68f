// loom-ddtbench: DDTBench's patterns (ddtbench_patterns.hpp) on device
// memory. For each pattern: MPI_Pack and MPI_Unpack with the input and the
// output both on the device (Loom takes them), beside the naive path (copy
// the whole buffer to the host, the MPI's own pack there, copy the packed
// bytes back) and the bound of a device-to-device cudaMemcpy of the packed
// size; then, on 2 ranks or more, a ping-pong of one element between ranks
// 0 and 1 through Loom, beside a contiguous message of the packed size and
// the naive path (the whole buffer down, sent from the host, the whole
// buffer up). Every result is checked byte for byte against the MPI's own
// PMPI_Pack / PMPI_Unpack on host copies, gaps included (docs/ddtbench.md).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli.hpp"
#include "ddtbench_patterns.hpp"
#include "transport/memtype.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::ddt {
namespace {

constexpr int kSkip = 77;  // no device to run on (ctest's skip code)

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "loom-ddtbench: %s\n", what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

// Device memory: a GPU's, or host memory that Loom's test mode
// LOOM_TEST_HOST_AS_DEVICE=1 takes for device memory.
class Memory {
 public:
  explicit Memory(bool host_as_device) : fake_(host_as_device) {}
  std::string name() const {
#ifdef LOOM_HAVE_CUDA
    if (!fake_) {
      int d = 0;
      cudaDeviceProp prop;
      if (cudaGetDevice(&d) == cudaSuccess && cudaGetDeviceProperties(&prop, d) == cudaSuccess)
        return prop.name;
    }
#endif
    return "host-as-device";
  }
  void* device(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
#ifdef LOOM_HAVE_CUDA
    if (!fake_) {
      void* p = nullptr;
      check(cudaMalloc(&p, bytes), "cudaMalloc");
      return p;
    }
#endif
    return plain(bytes);
  }
  void release(void* p) {
#ifdef LOOM_HAVE_CUDA
    if (!fake_) return check(cudaFree(p), "cudaFree");
#endif
    std::free(p);
  }
  // Host memory the MPI reads directly: pinned on a GPU machine, marked as
  // host memory in the test mode.
  void* host(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
#ifdef LOOM_HAVE_CUDA
    if (!fake_) {
      void* p = nullptr;
      check(cudaMallocHost(&p, bytes), "cudaMallocHost");
      return p;
    }
#endif
    void* p = plain(bytes);
    transport::test_mark_host(p, bytes);
    return p;
  }
  void release_host(void* p) {
#ifdef LOOM_HAVE_CUDA
    if (!fake_) return check(cudaFreeHost(p), "cudaFreeHost");
#endif
    transport::test_mark_host(p, 0);
    std::free(p);
  }
  // Synchronous copies; kind: 'd' device to device, 'h' to the host, 'u' up.
  void copy(void* to, const void* from, size_t bytes, char kind) {
#ifdef LOOM_HAVE_CUDA
    if (!fake_) {
      const cudaMemcpyKind k = kind == 'd'   ? cudaMemcpyDeviceToDevice
                               : kind == 'h' ? cudaMemcpyDeviceToHost
                                             : cudaMemcpyHostToDevice;
      check(cudaMemcpy(to, from, bytes, k), "cudaMemcpy");
      if (kind == 'd') check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      return;
    }
#endif
    (void)kind;
    std::memcpy(to, from, bytes);
  }

 private:
  static void* plain(size_t bytes) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) fail("host allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
#ifdef LOOM_HAVE_CUDA
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(e));
  }
#endif
  bool fake_;
};

struct Options {
  double scale = 1.0;
  std::vector<std::string> only;
  double budget = 0.2;  // seconds of timing per measurement, about
  std::string csv;
  bool pingpong = true;
  bool quiet = false;
  bool list = false;
};

const char* kUsage =
    "usage: [mpirun -np 2] loom-ddtbench [options]\n"
    "  --scale S          multiply every pattern's linear size by S (1: about 1 MiB packed)\n"
    "  --patterns LIST    comma list of names (all); --list prints them\n"
    "  --budget SECONDS   timing per measurement, about (0.2)\n"
    "  --no-pingpong      only MPI_Pack / MPI_Unpack\n"
    "  --csv FILE         also write the rows to FILE (rank 0)\n"
    "  --quiet            no progress lines on stderr (one a pattern otherwise)\n"
    "  -h, --help         this text\n"
    "Prints a Markdown table: pack/unpack time of each pattern on device memory\n"
    "beside the device-to-device copy bound and the naive path, and ping-pong\n"
    "times; every pattern is checked against the MPI's own MPI_Pack/MPI_Unpack.\n"
    "Without a GPU: LOOM_TEST_HOST_AS_DEVICE=1 (host memory taken for device memory).\n"
    "examples:\n"
    "  mpirun -np 2 loom-ddtbench --csv ddtbench.csv\n"
    "  LOOM_TEST_HOST_AS_DEVICE=1 loom-ddtbench --patterns nas_lu_x,wrf_x_sa --no-pingpong\n";

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  const std::string s = v;
  return s == "1" || s == "y" || s == "yes" || s == "true" || s == "on";
}

// Median seconds of fn over repetitions filling about `budget` seconds
// (after one warm-up, which also gives the estimate).
double median(const std::function<void()>& fn, double budget) {
  auto once = [&] {
    const auto a = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  const double est = once();
  const int reps = std::clamp(static_cast<int>(budget / std::max(est, 1e-7)), 5, 1001) | 1;
  std::vector<double> t(reps);
  for (double& x : t) x = once();
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

// First differing byte of two buffers, or -1.
long long first_difference(const std::vector<unsigned char>& a, const unsigned char* b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long long>(i);
  return -1;
}

struct Row {
  std::string name;
  size_t packed = 0, span = 0;
  double pack = 0, unpack = 0, bound = 0, naive_pack = 0, naive_unpack = 0;
  double pp = -1, contig = -1, naive_pp = -1;  // one-way seconds; < 0: not run
  std::string failed;                          // what did not match, empty when all did
};

class Bench {
 public:
  Bench(const Options& o, Memory& mem) : o_(o), mem_(mem) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  Row run(const Pattern& pat) {
    Row row;
    row.name = pat.name;
    row.span = pat.span;
    int max_packed = 0;
    MPI_Pack_size(1, pat.type, MPI_COMM_WORLD, &max_packed);

    // The source and a distinct filling of the destination, on the host.
    std::vector<unsigned char> src(pat.span), dst0(pat.span);
    for (size_t i = 0; i < pat.span; ++i) {
      src[i] = static_cast<unsigned char>((i * 131 + 7) >> 2);
      dst0[i] = static_cast<unsigned char>(0xa5 ^ (i * 7));
    }
    // The oracle: the MPI's own pack and unpack on host memory.
    std::vector<unsigned char> want_packed(static_cast<size_t>(max_packed)), want_dst = dst0;
    int packed = 0;
    PMPI_Pack(src.data(), 1, pat.type, want_packed.data(), max_packed, &packed, MPI_COMM_WORLD);
    want_packed.resize(static_cast<size_t>(packed));
    int at = 0;
    PMPI_Unpack(want_packed.data(), packed, &at, want_dst.data(), 1, pat.type, MPI_COMM_WORLD);
    row.packed = static_cast<size_t>(packed);
    // WRF's two spellings describe the same data: the same packed bytes.
    const std::string twin = pat.name.starts_with("wrf_") && pat.name.ends_with("_sa")
                                 ? pat.name.substr(0, pat.name.size() - 3) + "_vec"
                                 : "";
    if (auto it = spelled_.find(twin); it != spelled_.end() && it->second != want_packed)
      row.failed = "the MPI packs other bytes than from " + twin + " (the same data)";
    if (pat.name.starts_with("wrf_") && pat.name.ends_with("_vec"))
      spelled_[pat.name] = want_packed;

    void* d_src = mem_.device(pat.span);
    void* d_dst = mem_.device(pat.span);
    void* d_packed = mem_.device(static_cast<size_t>(max_packed));
    void* d_copy = mem_.device(static_cast<size_t>(max_packed));
    unsigned char* h_span = static_cast<unsigned char*>(mem_.host(pat.span));
    unsigned char* h_mirror = static_cast<unsigned char*>(mem_.host(pat.span));
    unsigned char* h_packed = static_cast<unsigned char*>(mem_.host(max_packed));
    mem_.copy(d_src, src.data(), pat.span, 'u');
    auto reset_dst = [&] { mem_.copy(d_dst, dst0.data(), pat.span, 'u'); };
    std::vector<unsigned char> got(pat.span);
    auto expect = [&](const void* dev, const std::vector<unsigned char>& want, const char* what) {
      mem_.copy(got.data(), dev, want.size(), 'h');
      const long long i = first_difference(want, got.data());
      if (i >= 0 && row.failed.empty())
        row.failed = std::string(what) + " differs from the MPI's at byte " + std::to_string(i);
    };

    // Pack and unpack, device to device, through Loom; checked, then timed
    // on rank 0 alone (ranks may share the GPU).
    auto pack = [&] {
      int pos = 0;
      MPI_Pack(d_src, 1, pat.type, d_packed, max_packed, &pos, MPI_COMM_WORLD);
    };
    auto unpack = [&] {
      int pos = 0;
      MPI_Unpack(d_packed, packed, &pos, d_dst, 1, pat.type, MPI_COMM_WORLD);
    };
    pack();
    expect(d_packed, want_packed, "MPI_Pack");
    reset_dst();
    unpack();
    expect(d_dst, want_dst, "MPI_Unpack");
    // The naive path: the whole buffer down, the MPI's pack on the host,
    // the packed bytes up (unpack: both down, the MPI's unpack, the buffer up).
    auto naive_pack = [&] {
      int pos = 0;
      mem_.copy(h_span, d_src, pat.span, 'h');
      MPI_Pack(h_span, 1, pat.type, h_packed, max_packed, &pos, MPI_COMM_WORLD);
      mem_.copy(d_packed, h_packed, static_cast<size_t>(packed), 'u');
    };
    auto naive_unpack = [&] {
      int pos = 0;
      mem_.copy(h_packed, d_packed, static_cast<size_t>(packed), 'h');
      mem_.copy(h_span, d_dst, pat.span, 'h');
      MPI_Unpack(h_packed, packed, &pos, h_span, 1, pat.type, MPI_COMM_WORLD);
      mem_.copy(d_dst, h_span, pat.span, 'u');
    };
    naive_pack();
    expect(d_packed, want_packed, "naive pack");
    reset_dst();
    naive_unpack();
    expect(d_dst, want_dst, "naive unpack");
    if (rank_ == 0) {
      row.pack = median(pack, o_.budget);
      row.unpack = median(unpack, o_.budget);
      row.naive_pack = median(naive_pack, o_.budget);
      row.naive_unpack = median(naive_unpack, o_.budget);
      row.bound = median([&] { mem_.copy(d_copy, d_packed, row.packed, 'd'); }, o_.budget);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    if (o_.pingpong && size_ >= 2) {
      // Loom: one element of the type, device to device.
      reset_dst();
      row.pp = pingpong([&](int peer, bool send) {
        if (send)
          MPI_Send(rank_ == 0 ? d_src : d_dst, 1, pat.type, peer, 1, MPI_COMM_WORLD);
        else
          MPI_Recv(d_dst, 1, pat.type, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      });
      if (rank_ < 2) expect(d_dst, want_dst, "ping-pong");
      // A contiguous device message of the same size.
      row.contig = pingpong([&](int peer, bool send) {
        if (send)
          MPI_Send(d_packed, packed, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
        else
          MPI_Recv(d_copy, packed, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      });
      // Naive: the whole buffer down, sent from the host, the whole buffer
      // up at the receiver (whose host copy was in step beforehand).
      reset_dst();
      mem_.copy(h_mirror, d_dst, pat.span, 'h');
      row.naive_pp = pingpong([&](int peer, bool send) {
        if (send) {
          mem_.copy(h_span, rank_ == 0 ? d_src : d_dst, pat.span, 'h');
          MPI_Send(h_span, 1, pat.type, peer, 3, MPI_COMM_WORLD);
        } else {
          MPI_Recv(h_mirror, 1, pat.type, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          mem_.copy(d_dst, h_mirror, pat.span, 'u');
        }
      });
      if (rank_ < 2) expect(d_dst, want_dst, "naive ping-pong");
    }

    for (unsigned char* p : {h_packed, h_mirror, h_span}) mem_.release_host(p);
    for (void* p : {d_src, d_dst, d_packed, d_copy}) mem_.release(p);
    return row;
  }

 private:
  // One-way seconds of a ping-pong between ranks 0 and 1 (median of round
  // trips / 2, the count fixed by rank 0's first round trip); -1 elsewhere.
  // step(peer, send): rank 0 sends then receives, rank 1 the reverse.
  double pingpong(const std::function<void(int, bool)>& step) {
    auto round = [&] {
      if (rank_ == 0) {
        step(1, true);
        step(1, false);
      } else if (rank_ == 1) {
        step(0, false);
        step(0, true);
      }
    };
    auto timed = [&] {
      const auto a = std::chrono::steady_clock::now();
      round();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    };
    MPI_Barrier(MPI_COMM_WORLD);
    int reps = std::clamp(static_cast<int>(o_.budget / std::max(timed(), 1e-7)), 5, 1001) | 1;
    MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<double> t(reps);
    for (double& x : t) x = timed();
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    double one_way = t[reps / 2] / 2;
    MPI_Bcast(&one_way, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return one_way;
  }

  const Options& o_;
  Memory& mem_;
  int rank_ = 0, size_ = 1;
  std::map<std::string, std::vector<unsigned char>> spelled_;  // WRF's vector forms' bytes
};

std::string parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--list") {
      o.list = true;
      continue;
    }
    if (a == "--no-pingpong") {
      o.pingpong = false;
      continue;
    }
    if (a == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (a != "--scale" && a != "--budget" && a != "--patterns" && a != "--csv")
      return "unknown option " + a;
    if (i + 1 >= argc) return a + " needs a value";
    const std::string v = argv[++i];
    char* end = nullptr;
    if (a == "--scale" || a == "--budget") {
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(x > 0) || x > 64)
        return "bad value '" + v + "' for " + a;
      (a == "--scale" ? o.scale : o.budget) = x;
    } else if (a == "--patterns") {
      const std::vector<std::string> names = pattern_names();
      size_t at = 0;
      while (at <= v.size()) {
        size_t comma = std::min(v.find(',', at), v.size());
        const std::string n = v.substr(at, comma - at);
        if (!n.empty()) {
          if (std::find(names.begin(), names.end(), n) == names.end())
            return "unknown pattern '" + n + "' (--list)";
          o.only.push_back(n);
        }
        at = comma + 1;
      }
    } else if (a == "--csv") {
      o.csv = v;
    } else {
      return "unknown option " + a;
    }
  }
  return "";
}

void report(const std::vector<Row>& rows, const std::string& device, int size, FILE* csv) {
  auto us = [](double s) { return s * 1e6; };
  auto cell = [](double s) {
    char b[32] = "-";
    if (s >= 0) std::snprintf(b, sizeof b, "%.1f", s * 1e6);
    return std::string(b);
  };
  auto ratio = [](double a, double b) {
    char r[32] = "-";
    if (a > 0 && b > 0) std::snprintf(r, sizeof r, "%.2fx", a / b);
    return std::string(r);
  };
  std::printf(
      "\n| pattern | packed KiB | buffer MiB | pack us | unpack us | D2D bound us | pack / bound "
      "| naive pack us | naive / pack | naive unpack us | naive / unpack | ping-pong us | "
      "contiguous us | naive ping-pong us | naive / ping-pong | verified |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
      "| ---: | ---: | --- |\n");
  for (const Row& r : rows) {
    std::printf(
        "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.1f | %s | %.1f | %s | %s | %s | "
        "%s | %s | %s |\n",
        r.name.c_str(), r.packed / 1024.0, r.span / 1048576.0, us(r.pack), us(r.unpack),
        us(r.bound), ratio(r.pack, r.bound).c_str(), us(r.naive_pack),
        ratio(r.naive_pack, r.pack).c_str(), us(r.naive_unpack),
        ratio(r.naive_unpack, r.unpack).c_str(), cell(r.pp).c_str(), cell(r.contig).c_str(),
        cell(r.naive_pp).c_str(), ratio(r.naive_pp, r.pp).c_str(),
        r.failed.empty() ? "yes" : "FAILED");
    if (csv)
      std::fprintf(csv, "%s,\"%s\",%d,%zu,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%d\n",
                   r.name.c_str(), device.c_str(), size, r.packed, r.span, us(r.pack), us(r.unpack),
                   us(r.bound), us(r.naive_pack), us(r.naive_unpack), r.pp < 0 ? 0 : us(r.pp),
                   r.contig < 0 ? 0 : us(r.contig), r.naive_pp < 0 ? 0 : us(r.naive_pp),
                   r.failed.empty() ? 1 : 0);
  }
  std::fflush(stdout);
}

int run(const Options& o) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tools::cli::enable_progress(rank == 0 && !o.quiet);

  const bool fake = env_true("LOOM_TEST_HOST_AS_DEVICE");
  int have = fake;
#ifdef LOOM_HAVE_CUDA
  if (!fake) {
    MPI_Comm node;
    int local = 0, n = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    have = cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaSetDevice(local % n) == 0;
    cudaGetLastError();
  }
#endif
  int all = 0;
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (rank == 0)
      std::fprintf(stderr,
                   "loom-ddtbench: no GPU on some rank; without one run with "
                   "LOOM_TEST_HOST_AS_DEVICE=1\n");
    return kSkip;
  }
  Memory mem(fake);
  const std::string device = mem.name();
  if (rank == 0) {
    std::printf("loom-ddtbench: %s, %d rank%s, scale %g%s\n", device.c_str(), size,
                size == 1 ? "" : "s", o.scale,
                o.pingpong && size >= 2 ? "; ping-pong between ranks 0 and 1" : "");
    std::fflush(stdout);
  }
  FILE* csv = nullptr;
  if (rank == 0 && !o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (!csv) std::fprintf(stderr, "loom-ddtbench: cannot write %s\n", o.csv.c_str());
    if (csv)
      std::fprintf(csv,
                   "pattern,device,ranks,packed_bytes,buffer_bytes,pack_us,unpack_us,d2d_bound_"
                   "us,naive_pack_us,naive_unpack_us,pingpong_us,contiguous_us,naive_pingpong_"
                   "us,verified\n");
  }
  std::vector<Pattern> patterns = make_patterns(o.scale, o.only);
  Bench bench(o, mem);
  std::vector<Row> rows;
  bool ok = true;
  for (const Pattern& p : patterns) {
    tools::cli::progress("loom-ddtbench", "%s (%.1f MiB buffer)", p.name.c_str(),
                         static_cast<double>(p.span) / 1048576);
    Row r = bench.run(p);
    // A rank's failure fails the row everywhere.
    int mine = r.failed.empty() ? 0 : 1, any = 0;
    if (mine)
      std::fprintf(stderr, "loom-ddtbench: rank %d, %s: %s\n", rank, p.name.c_str(),
                   r.failed.c_str());
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && r.failed.empty()) r.failed = "on another rank";
    ok = ok && !any;
    rows.push_back(r);
  }
  free_patterns(patterns);
  if (rank == 0) {
    report(rows, device, size, csv);
    std::printf(ok ? "loom-ddtbench: every pattern matched the MPI's own pack and unpack\n"
                   : "loom-ddtbench: verification FAILED\n");
  }
  if (csv) std::fclose(csv);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace loom::ddt

int main(int argc, char** argv) {
  namespace cli = loom::tools::cli;
  if (cli::help_asked(argc, argv)) return cli::print_help(loom::ddt::kUsage);
  loom::ddt::Options o;
  if (const std::string bad = loom::ddt::parse(argc, argv, o); !bad.empty())
    return cli::usage_error("loom-ddtbench", bad);
  if (o.list) {
    for (const std::string& n : loom::ddt::pattern_names()) std::printf("%s\n", n.c_str());
    return 0;
  }
  MPI_Init(&argc, &argv);
  const int rc = loom::ddt::run(o);
  MPI_Finalize();
  return rc;
}
