// loom-measure, collectives: each call of model/coll_choice.hpp timed on
// every rank of the run (one node) through Loom's node engine and through
// the MPI's own on host mirrors, forced in turn (loom_set_coll_method), on
// buffers Loom sees as device memory. The runtime's auto takes the node
// engine from where the two curves last cross.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "loom/loom.h"
#include "measure.hpp"
#include "model/coll_choice.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::tools::measure {
namespace {

// One call of `name` in which each of n ranks receives `bytes` (floats for
// the reductions).
int call(const std::string& name, void* in, void* out, size_t bytes, int n) {
  const int each = static_cast<int>(bytes / static_cast<size_t>(n));
  const int floats = static_cast<int>(bytes / sizeof(float));
  if (name == "alltoall")
    return MPI_Alltoall(in, each, MPI_BYTE, out, each, MPI_BYTE, MPI_COMM_WORLD);
  if (name == "allgather")
    return MPI_Allgather(in, each, MPI_BYTE, out, each, MPI_BYTE, MPI_COMM_WORLD);
  if (name == "allreduce")
    return MPI_Allreduce(in, out, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (name == "bcast") return MPI_Bcast(out, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (name == "reduce_scatter_block")
    return MPI_Reduce_scatter_block(in, out, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_ERR_OTHER;
}

// The slowest rank's time of one call, median over samples (every rank
// runs sample_pair's loop: rank 0 decides when to stop).
Stats time_call(const Ctx& c, const std::string& name, void* in, void* out, size_t bytes, int n,
                bool* ok) {
  return sample_pair(c, [&] {
    PMPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_us();
    if (call(name, in, out, bytes, n) != MPI_SUCCESS) *ok = false;
    double mine = now_us() - t0, most = 0;
    PMPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return most;
  });
}

}  // namespace

void measure_coll(const Ctx& c, int ranks, model::Profile& p) {
  if (!c.loom_device || !c.on_node) {
    if (c.rank == 0)
      std::fprintf(stderr, "loom-measure: coll_*: skipped: %s\n",
                   !c.loom_device ? "Loom sees no device buffers here"
                                  : "the node engine needs every rank on one node");
    return;
  }
  // The node engine lends through the device method: every rank must have it.
  int method = loom_set_method("device") == MPI_SUCCESS ? 1 : 0, methods = 0;
  loom_set_method("auto");
  PMPI_Allreduce(&method, &methods, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!methods) {
    if (c.rank == 0)
      std::fprintf(stderr,
                   "loom-measure: coll_*: skipped: the node engine needs Loom's device method "
                   "on every rank (LOOM_METHOD unset, auto or device%s)\n",
                   c.host_mode ? "; in the host test mode LOOM_METHOD=device" : "");
    return;
  }
  constexpr double KiB = 1024, MiB = 1024 * KiB;
  // The crossings lie between a few KiB and a few hundred KiB a rank; every
  // point is cheap, so --quick keeps them all (with fewer repetitions).
  const std::vector<double> sizes = {KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB};
  // Room for the largest call: an all-to-all's or allgather's n blocks, a
  // reduce-scatter's n slices.
  const size_t most = static_cast<size_t>(sizes.back()) * static_cast<size_t>(ranks);
  void *in = nullptr, *out = nullptr;
  if (c.host_mode) {
    in = std::calloc(most, 1);
    out = std::calloc(most, 1);
  } else {
#ifdef LOOM_HAVE_CUDA
    if (cudaMalloc(&in, most) != cudaSuccess || cudaMemset(in, 0, most) != cudaSuccess)
      in = nullptr;
    if (cudaMalloc(&out, most) != cudaSuccess || cudaMemset(out, 0, most) != cudaSuccess)
      out = nullptr;
#endif
  }
  int have = in && out ? 1 : 0, all = 0;
  PMPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  bool ok = all != 0;
  for (const char* name : model::kCollCalls) {
    if (!ok) break;
    const double t0 = now_us();
    model::Curve node, mirror;
    for (double bytes : sizes) {
      // A reduce-scatter's bytes a rank are its slice: n of them go in.
      const size_t b = static_cast<size_t>(bytes);
      for (auto [engine, curve] : {std::pair{"node", &node}, std::pair{"mirror", &mirror}}) {
        loom_set_coll_method(engine);
        append(*curve, bytes, time_call(c, name, in, out, b, ranks, &ok));
      }
    }
    loom_set_coll_method("auto");
    p.curves[model::coll_term("node", name, ranks)] = node;
    p.curves[model::coll_term("mirror", name, ranks)] = mirror;
    const double from = model::coll_node_from(p, name, ranks);
    char what[96];
    if (from < 1e18)
      std::snprintf(what, sizeof what, "%d ranks, %s: node engine from %s", ranks,
                    range(sizes).c_str(), size_str(std::ceil(from)).c_str());
    else
      std::snprintf(what, sizeof what, "%d ranks, %s: mirrors throughout", ranks,
                    range(sizes).c_str());
    progress(c, std::string("coll_") + name, what, t0);
  }
  int fine = ok ? 1 : 0, every = 0;
  PMPI_Allreduce(&fine, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!every) {
    for (const char* name : model::kCollCalls)
      for (const char* engine : {"node", "mirror"})
        p.curves.erase(model::coll_term(engine, name, ranks));
    if (c.rank == 0) std::fprintf(stderr, "loom-measure: coll_*: a call failed; not recorded\n");
  }
  if (c.host_mode) {
    std::free(in);
    std::free(out);
  } else {
#ifdef LOOM_HAVE_CUDA
    cudaFree(in);
    cudaFree(out);
#endif
  }
}

}  // namespace loom::tools::measure
