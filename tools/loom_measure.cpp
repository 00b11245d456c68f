// loom-measure: measures on this machine every term of Loom's cost model
// (src/model/cost.hpp) and writes the system profile the runtime reads.
//
//   mpirun -np 2 loom-measure [--quick] [--quiet] [--out PATH]
//
// Two ranks, one GPU each or sharing one. Run once with both ranks on one
// node (mpi_on_node, ipc_copy, Loom's overheads) and, where there are
// several nodes, once across two (mpi_off_node): each run keeps the terms of
// the profile it did not measure. Without a GPU, or with
// LOOM_TEST_HOST_AS_DEVICE=1, the host engine and memcpy stand in for the GPU
// terms (identity gpu "host-test"), so the tool runs end to end in CI.
#include <mpi.h>
#include <sys/stat.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "measure.hpp"
#include "model/cost.hpp"
#include "model/profile.hpp"
#include "transport/identity.hpp"
#include "util/knobs.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef LOOM_PROJECT_VERSION
#define LOOM_PROJECT_VERSION "dev"
#endif

namespace {

namespace m = loom::tools::measure;
namespace model = loom::model;

struct Args {
  bool quick = false;
  bool quiet = false;
  std::string out;
  std::string error;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      a.quick = true;
    } else if (!std::strcmp(argv[i], "--quiet")) {
      a.quiet = true;
    } else if (!std::strcmp(argv[i], "--out")) {
      if (i + 1 >= argc) {
        a.error = "--out needs a path";
        break;
      }
      a.out = argv[++i];
    } else {
      a.error = std::string("unknown option ") + argv[i];
      break;
    }
  }
  return a;
}

const char* kUsage =
    "usage: mpirun -np 2 loom-measure [--quick] [--quiet] [--out PATH]\n"
    "  Measures the terms of Loom's cost model on this machine and writes the profile\n"
    "  (default: the path the runtime looks up for this GPU and MPI; LOOM_PROFILE or\n"
    "  LOOM_CACHE_DIR move it). Terms already in that profile that this run does not\n"
    "  measure are kept: run once on one node and once across two nodes. Prints the\n"
    "  LogGOP fits and the model's predictions; a line per term on stderr meanwhile.\n"
    "  With more than 2 ranks (all on one node) it times only the collectives on that\n"
    "  many ranks, for auto's engine choice: run it once per rank count you use.\n"
    "  --quick     coarse grid up to 1 MiB, few repetitions (seconds; for tests)\n"
    "  --quiet     no progress lines\n"
    "  --out PATH  write the profile there instead\n"
    "  -h, --help  this text\n"
    "examples:\n"
    "  mpirun -np 2 loom-measure                       # both ranks on this node\n"
    "  mpirun -np 2 --host a,b loom-measure            # then across two nodes\n"
    "  mpirun -np 4 loom-measure                       # collectives on 4 ranks\n"
    "  mpirun -np 2 loom-measure --quick --out profile.txt\n";

std::string utc_now() {
  char b[32];
  time_t t = time(nullptr);
  tm u{};
  gmtime_r(&t, &u);
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &u);
  return b;
}

// No GPU here (or a build without CUDA): the host stands in for it.
bool gpu_missing() {
#ifdef LOOM_HAVE_CUDA
  int n = 0;
  const bool none = cudaGetDeviceCount(&n) != cudaSuccess || n == 0;
  cudaGetLastError();
  return none;
#else
  return true;
#endif
}

// Rank 0: the profile to add to. A profile of another machine, or a file
// that does not read, is replaced (with a note), never merged.
model::Profile starting_profile(const std::string& path, const model::Identity& id) {
  model::Profile p;
  struct stat sb;
  if (stat(path.c_str(), &sb) == 0) {
    auto old = model::read_profile(path, &id);
    if (old) {
      p = std::move(old.value());
      std::fprintf(stderr, "loom-measure: adding to %s (measured %s on %s)\n", path.c_str(),
                   p.date.c_str(), p.host.c_str());
    } else {
      std::fprintf(stderr, "loom-measure: %s: not kept: %s\n", path.c_str(),
                   old.status().message().c_str());
    }
  }
  p.id = id;
  return p;
}

void print_report(const model::Profile& p, const std::string& path) {
  std::printf("profile: %s\n  gpu: %s\n  mpi: %s\n  host: %s, %s, loom %s\n", path.c_str(),
              p.id.gpu.c_str(), p.id.mpi.c_str(), p.host.c_str(), p.date.c_str(),
              p.loom_version.c_str());
  std::printf("LogGOP fits (L, o, g in us; G, O in ns/byte):\n");
  for (const auto& [name, f] : p.loggop)
    std::printf("  %-12s L %.3f  o %.3f  g %.3f  G %.4f  O %.4f\n", name.c_str(), f.L, f.o, f.g,
                f.G * 1e3, f.O * 1e3);
  std::printf("scalars:\n");
  for (const auto& [name, v] : p.scalars) std::printf("  %-16s %.3f\n", name.c_str(), v);

  const model::Model model(p);
  const auto missing = model.missing();
  if (!missing.empty()) {
    std::printf("terms not measured yet:");
    for (const auto& t : missing) std::printf(" %s", t.c_str());
    std::printf("\n");
  }
  // A check of the whole: predictions for shapes with known answers.
  struct Case {
    const char* name;
    model::Shape shape;
  } cases[] = {
      {"contiguous 4 KiB", {4096, 4096, true, true, true}},
      {"contiguous 1 MiB", {1 << 20, 1 << 20, true, true, true}},
      {"contiguous 16 MiB", {16 << 20, 16 << 20, true, true, true}},
      {"2D 8 B blocks, 1 MiB", {1 << 20, 8, false, true, true}},
  };
  std::printf("model predictions, on node:\n");
  for (const Case& c : cases)
    std::printf("  %-22s %s\n", c.name, model.predict(c.shape).explain().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = loom::tools::cli;
  if (cli::help_asked(argc, argv)) return cli::print_help(kUsage);
  const Args args = parse(argc, argv);
  if (!args.error.empty()) return cli::usage_error("loom-measure", args.error);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) {
      std::fprintf(stderr, "loom-measure: needs 2 MPI ranks (or more for collectives), got %d\n",
                   size);
      std::fputs(kUsage, stderr);
    }
    MPI_Finalize();
    return 2;
  }

  m::Ctx c;
  c.rank = rank;
  c.peer = rank == 0 ? 1 : 0;
  c.quick = args.quick;
  c.quiet = args.quiet;
  c.grid = m::Grid::make(args.quick);
  c.reps = m::Reps::make(args.quick);
  const bool test_mode = loom::knob_true(loom::knobs().test_host_as_device);
  c.host_mode = test_mode || gpu_missing();
  // The Loom ping-pong needs buffers Loom moves as device memory.
  c.loom_device = test_mode || !c.host_mode;

  MPI_Comm node;
  PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_size = 0, node_rank = 0;
  PMPI_Comm_size(node, &node_size);
  PMPI_Comm_rank(node, &node_rank);
  PMPI_Comm_free(&node);
  c.on_node = node_size == size;
#ifdef LOOM_HAVE_CUDA
  if (!c.host_mode) {
    int ngpu = 1;
    cudaGetDeviceCount(&ngpu);
    cudaSetDevice(node_rank % ngpu);
  }
#endif

  // Rank 0 names the profile; both ranks stop if it cannot.
  model::Profile p;
  std::string path;
  int ok = 1;
  if (rank == 0) {
    const model::Identity id = loom::transport::machine_identity(c.host_mode);
    path = args.out.empty() ? model::profile_path(id) : args.out;
    if (path.empty()) {
      std::fprintf(stderr, "loom-measure: no cache directory (HOME unset?): give --out PATH\n");
      ok = 0;
    } else {
      std::fprintf(stderr, "loom-measure: %s | %s | ranks %s | %s grid\n", id.gpu.c_str(),
                   id.mpi.c_str(), c.on_node ? "on one node" : "on two nodes",
                   args.quick ? "quick" : "full");
      p = starting_profile(path, id);
    }
  }
  PMPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!ok) {
    MPI_Finalize();
    return 1;
  }

  // Ranks sharing a GPU without MPS measure the GPU's time-slicing, not the
  // methods: the profile says how it was taken, and the run says so.
  const loom::transport::GpuSharing gs = loom::transport::gpu_sharing(false);
  if (size == 2) {  // the point-to-point terms' conditions
    if (gs.gpus > 0)
      p.scalars[model::term::kRanksPerGpu] = static_cast<double>(gs.ranks_on_node) / gs.gpus;
    p.scalars[model::term::kMps] = gs.mps ? 1 : 0;
  }
  if (const std::string w = loom::transport::sharing_warning(gs); !w.empty() && rank == 0)
    std::fprintf(stderr, "loom-measure: %s\n", w.c_str());

  const double t0 = m::now_us();
  p.scalars[model::term::kHeaderBytes] = model::kDefaultHeaderBytes;
  if (size > 2) {
    m::measure_coll(c, size, p);
  } else {
    m::measure_local(c, p);
    m::measure_host_mpi(c, p);
  }
  if (size == 2 && c.on_node) {
    m::measure_ipc(c, p);
    m::measure_loom_overheads(c, p);
    m::measure_coll(c, size, p);
  } else if (size == 2 && rank == 0) {
    std::fprintf(stderr,
                 "loom-measure: ranks on two nodes: ipc_copy and overhead_* need one node; kept "
                 "from the profile where it has them\n");
  }

  int rc = 0;
  if (rank == 0) {
    p.host = loom::transport::host_name();
    p.date = utc_now();
    p.loom_version = LOOM_PROJECT_VERSION;
    loom::Status s = model::write_profile(path, p);
    if (!s) {
      std::fprintf(stderr, "loom-measure: writing %s: %s\n", path.c_str(), s.message().c_str());
      rc = 1;
    } else {
      std::fprintf(stderr, "loom-measure: done in %.1f s\n", (m::now_us() - t0) * 1e-6);
      print_report(p, path);
    }
  }
  MPI_Finalize();
  return rc;
}
