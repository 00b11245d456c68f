// loom-inspect: what Loom makes of classic datatypes (IR, canonical form,
// kernel layout) and how fast its host engine packs them next to MPI_Pack.
//   loom-inspect            the demo over the classic catalogue
//   loom-inspect --config   every LOOM_* setting with its default and value
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "classic_types.hpp"
#include "cli.hpp"
#include "loom/loom.h"
#include "timing.hpp"
#include "util/knobs.hpp"

namespace {

int print_config() {
  std::printf("%-18s %-8s %-8s %s\n", "setting", "default", "value", "meaning");
  for (const auto& k : loom::knob_table())
    std::printf("%-18s %-8s %-8s %s\n", k.env, k.def, k.value.c_str(), k.doc);
  const auto refused = loom::knob_problems();
  for (const std::string& p : refused) std::printf("refused: %s\n", p.c_str());
  return refused.empty() ? 0 : 1;
}

// Median seconds of MPI_Pack and loom_pack of the same data, timed alternately.
std::pair<double, double> pack_seconds(MPI_Datatype t, int count, const std::vector<char>& src,
                                       std::vector<char>& mpi_out, std::vector<char>& loom_out) {
  const int cap = static_cast<int>(mpi_out.size());
  auto mpi = [&] {
    int pos = 0;
    PMPI_Pack(src.data(), count, t, mpi_out.data(), cap, &pos, MPI_COMM_SELF);
  };
  auto loom = [&] {
    int pos = 0;
    loom_pack(src.data(), count, t, loom_out.data(), cap, &pos, MPI_COMM_SELF);
  };
  double once = loom::tools::median_seconds(mpi, 3);
  return loom::tools::median_pair(mpi, loom, loom::tools::reps_for(once));
}

const char* kUsage =
    "usage: loom-inspect [--config]\n"
    "  Prints what Loom makes of classic datatypes (IR, canonical form, kernel\n"
    "  layout) and its host pack throughput beside MPI_Pack, as a Markdown table.\n"
    "  --config    every LOOM_* setting with its default, its value here and meaning\n"
    "  -h, --help  this text\n"
    "example:\n"
    "  loom-inspect --config\n";

}  // namespace

int main(int argc, char** argv) {
  namespace cli = loom::tools::cli;
  if (cli::help_asked(argc, argv)) return cli::print_help(kUsage);
  if (argc > 2) return cli::usage_error("loom-inspect", std::string("unexpected ") + argv[2]);
  if (argc > 1 && std::strcmp(argv[1], "--config") == 0) return print_config();
  if (argc > 1) return cli::usage_error("loom-inspect", std::string("unknown option ") + argv[1]);
  MPI_Init(&argc, &argv);
  loom_init();
  std::printf("Loom %d.%d: canonical forms and host pack throughput of classic datatypes\n\n",
              LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR);
  std::printf("| type | count | packed | MPI_Pack GB/s | Loom GB/s | Loom / MPI |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  std::string details;
  for (const auto& c : loom::tools::classic_types()) {
    MPI_Datatype t = c.make();
    loom_type_commit(t);
    char buf[4096];
    loom_type_describe(t, buf, sizeof buf);
    details += "## " + c.name + "\n" + buf + "\n";
    MPI_Aint lb, ext;
    int size;
    MPI_Type_get_extent(t, &lb, &ext);
    MPI_Type_size(t, &size);
    std::vector<char> src(static_cast<size_t>(lb + ext * c.count) + 64, 1);
    std::vector<char> ref(static_cast<size_t>(size) * c.count), out(ref.size());
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 31 + 7);
    auto [tm, tl] = pack_seconds(t, c.count, src, ref, out);
    bool same = ref == out;
    double bytes = static_cast<double>(size) * c.count;
    std::printf("| %s | %d | %.0f KiB | %.2f | %.2f | %.2fx%s |\n", c.name.c_str(), c.count,
                bytes / 1024, bytes / tm / 1e9, bytes / tl / 1e9, tm / tl, same ? "" : " MISMATCH");
    loom_type_free(t);
    MPI_Type_free(&t);
  }
  std::printf("\n%s", details.c_str());
  loom_finalize();
  MPI_Finalize();
  return 0;
}
