// loom-p2p: point-to-point latency and bandwidth on device buffers, as a
// plain MPI program (MPI and the CUDA runtime only, no Loom), so that the
// very same binary measures any MPI: a CUDA-aware one alone, or one that is
// not, with Loom loaded under it (LD_PRELOAD), or the naive path a user
// without either writes (--naive: copy to pinned host memory, MPI on host
// memory, copy back). The tests are shaped like the OSU micro-benchmarks:
//   lat  ping-pong, one-way time (median of the round trips / 2)
//   bw   a window of W MPI_Isend (MPI_Irecv on the other rank), MPI_Waitall,
//        then a small ack; bytes per second over the windows
// Each row: label,test,type,bytes,value (µs or GB/s) on stdout (rank 0).
//   mpirun -np 2 loom-p2p --label NAME [--tests lat,bw] [--type contig|vector]
//          [--naive] [--window 64] [--max BYTES] [--quick] [--quiet]
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.hpp"

namespace {

namespace cli = loom::tools::cli;

struct Options {
  std::string label = "mpi";
  bool lat = true, bw = true;
  bool vector = false;  // 8-byte blocks every 16 bytes instead of contiguous bytes
  bool naive = false;
  int window = 64;
  size_t max_bytes = size_t{16} << 20;
  size_t max_bw = size_t{256} << 20;
  bool quick = false;
  bool quiet = false;
  std::vector<size_t> sizes;  // --sizes: these, for both tests (default: the usual ladders)
};

const char* kUsage =
    "usage: mpirun -np 2 loom-p2p [options]\n"
    "  Point-to-point latency and bandwidth on device buffers, as a plain MPI program\n"
    "  (no Loom inside): run it on a CUDA-aware MPI, under Loom (loomrun / LD_PRELOAD)\n"
    "  or with --naive. Prints CSV rows label,test,type,bytes,value (us or GB/s).\n"
    "  --label L            first column of every row (mpi)\n"
    "  --tests LIST         lat, bw or lat,bw (both)\n"
    "  --type contig|vector contiguous bytes, or 8-byte blocks every 16 bytes (contig)\n"
    "  --naive              copy to pinned host memory, MPI there, copy back\n"
    "  --window W           messages in flight in the bandwidth test (64)\n"
    "  --max BYTES          largest message (16 MiB latency, 256 MiB bandwidth)\n"
    "  --sizes LIST         these message sizes (bytes, comma-separated) in both tests\n"
    "  --quick              fewer repetitions\n"
    "  --quiet              no progress lines on stderr (one a size otherwise)\n"
    "  -h, --help           this text\n"
    "examples:\n"
    "  loomrun mpirun -np 2 loom-p2p --label loom > loom.csv\n"
    "  mpirun -np 2 loom-p2p --label naive --naive --tests lat\n";

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "loom-p2p: %s: %s\n", what, cudaGetErrorString(e));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

// A message of `bytes` data bytes: its datatype, count and the span it covers.
struct Shape {
  MPI_Datatype type = MPI_BYTE;
  int count = 0;
  size_t span = 0;
};
Shape shape(size_t bytes, bool vector) {
  Shape s;
  if (!vector) {
    s.count = static_cast<int>(bytes);
    s.span = bytes;
    return s;
  }
  const int n = static_cast<int>(bytes / 8);
  MPI_Type_vector(n, 1, 2, MPI_DOUBLE, &s.type);
  MPI_Type_commit(&s.type);
  s.count = 1;
  s.span = static_cast<size_t>(n) * 16;
  return s;
}
void release(Shape& s) {
  if (s.type != MPI_BYTE) MPI_Type_free(&s.type);
}

// The naive path's two copies around a host MPI call (the whole span moves).
struct Naive {
  void* host = nullptr;
  explicit Naive(size_t bytes) {
    check(cudaMallocHost(&host, std::max<size_t>(bytes, 1)), "pinned");
  }
  ~Naive() { cudaFreeHost(host); }
};

int send(const Options& o, void* dev, Naive* nv, const Shape& s, int to, int tag) {
  if (!o.naive) return MPI_Send(dev, s.count, s.type, to, tag, MPI_COMM_WORLD);
  check(cudaMemcpy(nv->host, dev, s.span, cudaMemcpyDeviceToHost), "copy down");
  return MPI_Send(nv->host, s.count, s.type, to, tag, MPI_COMM_WORLD);
}
int recv(const Options& o, void* dev, Naive* nv, const Shape& s, int from, int tag) {
  if (!o.naive) return MPI_Recv(dev, s.count, s.type, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const int rc = MPI_Recv(nv->host, s.count, s.type, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  check(cudaMemcpy(dev, nv->host, s.span, cudaMemcpyHostToDevice), "copy up");
  return rc;
}

double latency_us(const Options& o, int me, size_t bytes, void* a, void* b) {
  Shape s = shape(bytes, o.vector);
  Naive nv(s.span);
  const int reps = o.quick ? 20 : bytes <= (64 << 10) ? 1000 : bytes <= (1 << 20) ? 200 : 50;
  std::vector<double> t;
  for (int i = -10; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if (me == 0) {
      send(o, a, &nv, s, 1, 1);
      recv(o, b, &nv, s, 1, 1);
    } else {
      recv(o, b, &nv, s, 0, 1);
      send(o, a, &nv, s, 0, 1);
    }
    if (i >= 0) t.push_back((MPI_Wtime() - t0) / 2);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  double mine = t[t.size() / 2] * 1e6, out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  release(s);
  return out;
}

double bandwidth_gbs(const Options& o, int me, size_t bytes, std::vector<void*>& bufs) {
  Shape s = shape(bytes, o.vector);
  std::vector<Naive*> nv;
  if (o.naive)
    for (int i = 0; i < o.window; ++i) nv.push_back(new Naive(s.span));
  const int windows =
      o.quick ? 2 : std::max(2, static_cast<int>((size_t{4} << 30) / (bytes * o.window)));
  const int warm = 1;
  std::vector<MPI_Request> reqs(static_cast<size_t>(o.window));
  double t0 = 0;
  for (int w = -warm; w < std::min(windows, 20); ++w) {
    if (w == 0) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
    }
    for (int i = 0; i < o.window; ++i) {
      void* dev = bufs[static_cast<size_t>(i)];
      if (me == 0) {
        void* from = dev;
        if (o.naive) {
          check(cudaMemcpy(nv[i]->host, dev, s.span, cudaMemcpyDeviceToHost), "copy down");
          from = nv[i]->host;
        }
        MPI_Isend(from, s.count, s.type, 1, 2, MPI_COMM_WORLD, &reqs[static_cast<size_t>(i)]);
      } else {
        MPI_Irecv(o.naive ? nv[i]->host : dev, s.count, s.type, 0, 2, MPI_COMM_WORLD,
                  &reqs[static_cast<size_t>(i)]);
      }
    }
    MPI_Waitall(o.window, reqs.data(), MPI_STATUSES_IGNORE);
    if (me == 1 && o.naive)
      for (int i = 0; i < o.window; ++i)
        check(cudaMemcpy(bufs[static_cast<size_t>(i)], nv[i]->host, s.span, cudaMemcpyHostToDevice),
              "copy up");
    int ack = 0;
    if (me == 1)
      MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
    else
      MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  const double secs = MPI_Wtime() - t0;
  for (Naive* n : nv) delete n;
  release(s);
  const double gbs = static_cast<double>(bytes) * o.window * std::min(windows, 20) / secs / 1e9;
  double out = 0;
  MPI_Allreduce(&gbs, &out, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  return out;
}

// "" when fine, else what is wrong.
std::string parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool valued = a == "--label" || a == "--tests" || a == "--type" || a == "--window" ||
                        a == "--max" || a == "--sizes";
    if (valued && i + 1 >= argc) return a + " needs a value";
    auto next = [&]() -> const char* { return argv[++i]; };
    if (a == "--label") {
      o->label = next();
    } else if (a == "--tests") {
      const std::string t = next();
      o->lat = t.find("lat") != std::string::npos;
      o->bw = t.find("bw") != std::string::npos;
    } else if (a == "--type") {
      const std::string t = next();
      if (t != "contig" && t != "vector") return "--type takes contig or vector, not " + t;
      o->vector = t == "vector";
    } else if (a == "--naive") {
      o->naive = true;
    } else if (a == "--window") {
      o->window = std::max(1, std::atoi(next()));
    } else if (a == "--max") {
      o->max_bytes = o->max_bw = std::strtoull(next(), nullptr, 10);
    } else if (a == "--sizes") {
      for (const char* p = next(); *p;) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(p, &end, 10);
        if (end == p || v == 0) return "--sizes takes byte counts, comma-separated";
        o->sizes.push_back(static_cast<size_t>(v));
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return "--sizes takes byte counts, comma-separated";
      }
      o->max_bytes = o->max_bw = *std::max_element(o->sizes.begin(), o->sizes.end());
    } else if (a == "--quick") {
      o->quick = true;
    } else if (a == "--quiet") {
      o->quiet = true;
    } else {
      return "unknown option " + a;
    }
  }
  if (o->max_bytes == 0) return "--max takes a number of bytes";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (cli::help_asked(argc, argv)) return cli::print_help(kUsage);
  Options o;
  if (const std::string bad = parse(argc, argv, &o); !bad.empty())
    return cli::usage_error("loom-p2p", bad);
  MPI_Init(&argc, &argv);
  int me = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) {
    if (me == 0) std::fprintf(stderr, "loom-p2p: needs exactly 2 ranks, got %d\n", n);
    MPI_Finalize();
    return 2;
  }
  cli::enable_progress(me == 0 && !o.quiet);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (me == 0) std::fprintf(stderr, "loom-p2p: no GPU\n");
    MPI_Finalize();
    return 77;
  }
  check(cudaSetDevice(me % devices), "set device");
  const char* type = o.vector ? "vector" : "contig";
  const size_t span_factor = o.vector ? 2 : 1;
  if (o.lat) {
    void *a = nullptr, *b = nullptr;
    check(cudaMalloc(&a, o.max_bytes * span_factor), "malloc");
    check(cudaMalloc(&b, o.max_bytes * span_factor), "malloc");
    check(cudaMemset(a, me + 1, o.max_bytes * span_factor), "memset");
    std::vector<size_t> ladder = o.sizes;
    for (size_t bytes = 8; o.sizes.empty() && bytes <= o.max_bytes; bytes *= 4)
      ladder.push_back(bytes);
    for (size_t bytes : ladder) {
      cli::progress("loom-p2p", "latency, %s, %zu bytes", type, bytes);
      const double us = latency_us(o, me, bytes, a, b);
      if (me == 0) std::printf("%s,lat,%s,%zu,%.2f\n", o.label.c_str(), type, bytes, us);
      std::fflush(stdout);
    }
    cudaFree(a);
    cudaFree(b);
  }
  if (o.bw) {
    std::vector<size_t> ladder = o.sizes;
    for (size_t bytes = 64 << 10; o.sizes.empty() && bytes <= o.max_bw; bytes *= 4)
      ladder.push_back(bytes);
    for (size_t bytes : ladder) {
      cli::progress("loom-p2p", "bandwidth, %s, %zu bytes", type, bytes);
      // Every message of a window from (into) one buffer, as osu_bw does.
      void* buf = nullptr;
      check(cudaMalloc(&buf, bytes * span_factor), "malloc");
      std::vector<void*> bufs(static_cast<size_t>(o.window), buf);
      const double gbs = bandwidth_gbs(o, me, bytes, bufs);
      if (me == 0) std::printf("%s,bw,%s,%zu,%.2f\n", o.label.c_str(), type, bytes, gbs);
      std::fflush(stdout);
      cudaFree(buf);
    }
  }
  MPI_Finalize();
  return 0;
}
