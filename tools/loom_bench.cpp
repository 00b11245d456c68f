// loom-bench: benchmarks that put Loom beside its baselines in one run.
//   loom-bench commit [--quick] [--csv F]       translate + canonicalise time per type
//   loom-bench pack [--quick] [--csv F]         host pack/unpack vs MPI_Pack/MPI_Unpack
//   loom-bench passthrough [--quick] [--csv F]  what Loom adds to calls on host buffers
//   loom-bench memtype [--quick] [--csv F]      what classifying a buffer costs
//   loom-bench pingpong [--quick] [--csv F]     device messages by each method vs the
//                                               naive baseline (2 ranks)
//   loom-bench coll [--quick] [--csv F] [--nonblocking]  collectives on device buffers
//                                               vs user-level staging
//   loom-bench stream [--quick] [--csv F]       stream-enqueued ping-pong (MPIX, MPIS)
//                                               vs CPU-driven (2 ranks)
//   loom-bench devpack [--quick]                per-call MPI_Pack/MPI_Unpack on the
//                                               device (prints CSV itself)
// Output is a Markdown table (devpack: CSV); --csv F also writes the rows to
// F. docs/ keeps the committed results. Progress (a line per case or size)
// goes to stderr unless --quiet.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "bench_coll.hpp"
#include "bench_devpack.hpp"
#include "bench_memtype.hpp"
#include "bench_pingpong.hpp"
#include "bench_stream.hpp"
#include "classic_types.hpp"
#include "cli.hpp"
#include "loom/loom.h"
#include "timing.hpp"
#include "transport/memtype.hpp"
#include "type/from_mpi.hpp"

namespace {

namespace cli = loom::tools::cli;
using loom::tools::median_seconds;
using loom::tools::reps_for;

int bench_commit(bool quick) {
  struct Case {
    std::string name;
    MPI_Datatype t;
  };
  std::vector<Case> cases = {
      {"2D vector 1024 x 8 B", loom::tools::make_2d(1024, 8)},
      {"2D vector 64 x 4 KiB", loom::tools::make_2d(64, 4096)},
      {"3D subarray 64^3 in 256^3", loom::tools::make_3d_box(64, 64, 64, 256, 256, 256)},
      {"3D subarray 1 x 256 x 256 (face)", loom::tools::make_3d_box(1, 256, 256, 256, 256, 256)},
      {"deep struct (4 levels)", loom::tools::make_deep_struct()},
  };
  {  // 3D box as nested hvectors: TEMPI's spelling
    MPI_Datatype row, plane, box;
    MPI_Type_vector(1, 64, 256, MPI_BYTE, &row);
    MPI_Type_create_hvector(64, 1, 256, row, &plane);
    MPI_Type_create_hvector(64, 1, 256 * 256, plane, &box);
    MPI_Type_commit(&box);
    MPI_Type_free(&row);
    MPI_Type_free(&plane);
    cases.push_back({"3D box as hvector of hvector of vector", box});
  }
  cli::table("| type | median translate + canonicalise (us) | reps |\n|---|---:|---:|\n");
  for (auto& c : cases) {
    auto once = [&] {
      auto r = loom::type::translate(c.t);
      if (!r) std::abort();
    };
    int reps = quick ? 101 : 20001;
    cli::progress("loom-bench", "commit: %s", c.name.c_str());
    double s = median_seconds(once, reps);
    cli::table("| %s | %.2f | %d |\n", c.name.c_str(), s * 1e6, reps);
    MPI_Type_free(&c.t);
  }
  return 0;
}

int bench_pack(bool quick) {
  cli::table(
      "| type | count | packed KiB | MPI_Pack GB/s | Loom pack GB/s | pack ratio | MPI_Unpack GB/s "
      "| Loom unpack GB/s | unpack ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  struct Case {
    std::string name;
    MPI_Datatype t;
    int count;
  };
  std::vector<Case> cases;
  for (int block : {1, 8, 64, 512, 4096}) {
    int rows = (quick ? 256 : 4096) * 1024 / block / 8;
    if (rows < 1) rows = 1;
    cases.push_back(
        {"2D " + std::to_string(block) + " B blocks", loom::tools::make_2d(rows, block), 8});
  }
  for (const auto& c : loom::tools::classic_types())
    cases.push_back({c.name, c.make(), quick ? std::max(1, c.count / 8) : c.count});
  for (auto& c : cases) {
    cli::progress("loom-bench", "pack: %s", c.name.c_str());
    loom_type_commit(c.t);
    MPI_Aint lb, ext;
    int size;
    MPI_Type_get_extent(c.t, &lb, &ext);
    MPI_Type_size(c.t, &size);
    size_t span = static_cast<size_t>(lb + ext * c.count) + 64;
    std::vector<char> src(span), dst(static_cast<size_t>(size) * c.count), out(span);
    for (size_t i = 0; i < span; ++i) src[i] = static_cast<char>(i * 13 + 1);
    int cap = static_cast<int>(dst.size());
    auto mpi_pack = [&] {
      int p = 0;
      PMPI_Pack(src.data(), c.count, c.t, dst.data(), cap, &p, MPI_COMM_SELF);
    };
    auto loom_p = [&] {
      int p = 0;
      loom_pack(src.data(), c.count, c.t, dst.data(), cap, &p, MPI_COMM_SELF);
    };
    auto mpi_unp = [&] {
      int p = 0;
      PMPI_Unpack(dst.data(), cap, &p, out.data(), c.count, c.t, MPI_COMM_SELF);
    };
    auto loom_u = [&] {
      int p = 0;
      loom_unpack(dst.data(), cap, &p, out.data(), c.count, c.t, MPI_COMM_SELF);
    };
    int reps = reps_for(median_seconds(mpi_pack, 3), quick ? 0.02 : 0.2);
    auto [tp, lp] = loom::tools::median_pair(mpi_pack, loom_p, reps);
    auto [tu, lu] = loom::tools::median_pair(mpi_unp, loom_u, reps);
    double b = static_cast<double>(size) * c.count;
    cli::table("| %s | %d | %.0f | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx |\n", c.name.c_str(),
               c.count, b / 1024, b / tp / 1e9, b / lp / 1e9, tp / lp, b / tu / 1e9, b / lu / 1e9,
               tu / lu);
    loom_type_free(c.t);
    MPI_Type_free(&c.t);
  }
  return 0;
}

// The cost Loom adds to calls on host buffers: each call made through the
// interposed symbol and straight to PMPI_, alternately, in one process.
int bench_passthrough(bool quick) {
  const int batch = quick ? 2000 : 20000, reps = quick ? 21 : 101;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_SELF, &rank);
  std::vector<double> src(64, 1.0), dst(64);
  MPI_Datatype vec;
  MPI_Type_vector(8, 1, 2, MPI_DOUBLE, &vec);
  MPI_Type_commit(&vec);
  char packed[512];
  struct Case {
    const char* name;
    std::function<void()> loom, pmpi;
  };
  auto self_pair = [&](bool via_loom) {
    MPI_Request r[2];
    if (via_loom) {
      MPI_Irecv(dst.data(), 8, MPI_DOUBLE, 0, 1, MPI_COMM_SELF, &r[0]);
      MPI_Isend(src.data(), 8, MPI_DOUBLE, 0, 1, MPI_COMM_SELF, &r[1]);
      MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    } else {
      PMPI_Irecv(dst.data(), 8, MPI_DOUBLE, 0, 1, MPI_COMM_SELF, &r[0]);
      PMPI_Isend(src.data(), 8, MPI_DOUBLE, 0, 1, MPI_COMM_SELF, &r[1]);
      PMPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    }
  };
  std::vector<Case> cases = {
      {"MPI_Test(MPI_REQUEST_NULL)",
       [] {
         MPI_Request r = MPI_REQUEST_NULL;
         int f;
         MPI_Test(&r, &f, MPI_STATUS_IGNORE);
       },
       [] {
         MPI_Request r = MPI_REQUEST_NULL;
         int f;
         PMPI_Test(&r, &f, MPI_STATUS_IGNORE);
       }},
      {"classify a host buffer (memkind) vs nothing",
       [&] {
         volatile auto k = loom::transport::memkind(src.data());
         (void)k;
       },
       [] {}},
      {"Irecv + Isend + Waitall to self, 64 B", [&] { self_pair(true); },
       [&] { self_pair(false); }},
      {"MPI_Pack of vector(8,1,2,double)",
       [&] {
         int p = 0;
         MPI_Pack(src.data(), 1, vec, packed, 512, &p, MPI_COMM_SELF);
       },
       [&] {
         int p = 0;
         PMPI_Pack(src.data(), 1, vec, packed, 512, &p, MPI_COMM_SELF);
       }},
  };
  cli::table(
      "| host-buffer call (rank %d) | via Loom ns | straight to PMPI ns | added ns |\n"
      "|---|---:|---:|---:|\n",
      rank);
  for (auto& c : cases) {
    cli::progress("loom-bench", "passthrough: %s", c.name);
    auto loom_batch = [&] {
      for (int i = 0; i < batch; ++i) c.loom();
    };
    auto pmpi_batch = [&] {
      for (int i = 0; i < batch; ++i) c.pmpi();
    };
    auto [tl, tp] = loom::tools::median_pair(loom_batch, pmpi_batch, reps);
    cli::table("| %s | %.1f | %.1f | %.1f |\n", c.name, tl / batch * 1e9, tp / batch * 1e9,
               (tl - tp) / batch * 1e9);
  }
  MPI_Type_free(&vec);
  return 0;
}

const char* kUsage =
    "usage: [mpirun -np N] loom-bench BENCHMARK [--quick] [--quiet] [--csv FILE]\n"
    "  Puts Loom beside its baselines in one run; prints a Markdown table.\n"
    "benchmarks:\n"
    "  commit       translate + canonicalise time per datatype (1 rank)\n"
    "  pack         host pack/unpack throughput vs MPI_Pack/MPI_Unpack (1 rank)\n"
    "  passthrough  what Loom adds to calls on host buffers (1 rank)\n"
    "  pingpong     device messages by each method, auto and the model's predictions\n"
    "               vs the naive path and NCCL (2 ranks, GPU)\n"
    "  coll         collectives on device buffers vs user-level staging (N ranks, GPU)\n"
    "  stream       stream-enqueued ping-pong and halo (MPIX, MPIS) vs CPU-driven (2 ranks)\n"
    "  memtype      what classifying a buffer as host or device memory costs, per kind (1 rank)\n"
    "  devpack      MPI_Pack/MPI_Unpack device to device on TEMPI's shapes, per call (1 rank)\n"
    "options:\n"
    "  --quick      fewer sizes and repetitions (seconds; for tests)\n"
    "  --quiet      no progress lines on stderr\n"
    "  --csv FILE   also write the rows to FILE (rank 0); commit, pack, passthrough and\n"
    "               memtype write their Markdown tables' rows as they print them (a\n"
    "               ratio's x dropped); devpack prints CSV on stdout and ignores it\n"
    "  --nonblocking  coll: only the nonblocking forms (MPI_I... + MPI_Wait)\n"
    "  --from BYTES coll: only sizes of at least BYTES a rank\n"
    "  --second NAME  coll: the engine the \"node engine\" column forces (default node;\n"
    "               staged where the ranks are off the node)\n"
    "  -h, --help   this text\n"
    "examples:\n"
    "  loom-bench pack --quick\n"
    "  mpirun -np 4 loom-bench coll --csv coll.csv\n";

}  // namespace

int main(int argc, char** argv) {
  const char* cmds[] = {"commit", "pack",   "passthrough", "pingpong",
                        "coll",   "stream", "memtype",     "devpack"};
  if (cli::help_asked(argc, argv)) return cli::print_help(kUsage);
  if (argc < 2) return cli::usage_error("loom-bench", "which benchmark? (commit, pack, ...)");
  if (argv[1][0] == '-')
    return cli::usage_error("loom-bench", std::string("unknown option ") + argv[1]);
  if (std::none_of(std::begin(cmds), std::end(cmds),
                   [&](const char* c) { return std::strcmp(argv[1], c) == 0; }))
    return cli::usage_error("loom-bench", std::string("unknown benchmark ") + argv[1]);
  bool quick = false, quiet = false, nonblocking = false;
  const char* csv = nullptr;
  size_t from = 0;
  const char* second = "node";
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--quiet") == 0) {
      quiet = true;
    } else if (std::strcmp(argv[i], "--nonblocking") == 0 && std::strcmp(argv[1], "coll") == 0) {
      nonblocking = true;
    } else if (std::strcmp(argv[i], "--from") == 0 && std::strcmp(argv[1], "coll") == 0) {
      if (i + 1 >= argc) return cli::usage_error("loom-bench", "--from needs a size in bytes");
      char* end = nullptr;
      const unsigned long long v = std::strtoull(argv[++i], &end, 10);
      if (!end || *end != '\0')
        return cli::usage_error("loom-bench", "--from needs a size in bytes");
      from = static_cast<size_t>(v);
    } else if (std::strcmp(argv[i], "--second") == 0 && std::strcmp(argv[1], "coll") == 0) {
      if (i + 1 >= argc) return cli::usage_error("loom-bench", "--second needs an engine name");
      second = argv[++i];
    } else if (std::strcmp(argv[i], "--csv") == 0) {
      if (i + 1 >= argc) return cli::usage_error("loom-bench", "--csv needs a file name");
      csv = argv[++i];
    } else {
      return cli::usage_error("loom-bench", std::string("unknown option ") + argv[i]);
    }
  }
  // stream: Loom's progress thread calls the MPI beside the main thread
  // (the other benchmarks keep the MPI's single-threaded mode).
  int provided = 0;
  if (std::strcmp(argv[1], "stream") == 0)
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  else
    MPI_Init(&argc, &argv);
  loom_init();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  cli::enable_progress(rank == 0 && !quiet);
  const bool own_csv = std::strcmp(argv[1], "pingpong") == 0 || std::strcmp(argv[1], "coll") == 0 ||
                       std::strcmp(argv[1], "stream") == 0 || std::strcmp(argv[1], "devpack") == 0;
  if (csv && !own_csv) {  // every rank stops if rank 0 cannot write it
    int csv_ok = 1;
    if (rank == 0 && !cli::csv_tables(csv)) {
      std::fprintf(stderr, "loom-bench: cannot write %s\n", csv);
      csv_ok = 0;
    }
    MPI_Bcast(&csv_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!csv_ok) {
      loom_finalize();
      MPI_Finalize();
      return 1;
    }
  }
  int rc = std::strcmp(argv[1], "commit") == 0     ? bench_commit(quick)
           : std::strcmp(argv[1], "pack") == 0     ? bench_pack(quick)
           : std::strcmp(argv[1], "pingpong") == 0 ? loom::tools::bench_pingpong(quick, csv)
           : std::strcmp(argv[1], "coll") == 0
               ? loom::tools::bench_coll(quick, csv, nonblocking, from, second)
           : std::strcmp(argv[1], "stream") == 0  ? loom::tools::bench_stream(quick, csv)
           : std::strcmp(argv[1], "memtype") == 0 ? loom::tools::bench_memtype(quick)
           : std::strcmp(argv[1], "devpack") == 0 ? loom::tools::bench_devpack(quick)
                                                  : bench_passthrough(quick);
  loom_finalize();
  MPI_Finalize();
  return rc;
}
