// loom-bench pingpong: one-way time of a device message between two ranks,
// for each method forced (loom_set_method), auto, and the baseline a user
// without a CUDA-aware MPI writes today: copy the type's whole extent to the
// host, MPI with the datatype on host memory, copy the extent back.
// Each forced method's cell shows the model's prediction in brackets (with a
// profile from loom-measure); a summary checks the rows against the targets.
// Run with 2 ranks (one GPU each, or sharing one).
#include "bench_pingpong.hpp"

#include "cli.hpp"

#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

#include "loom/loom.h"
#include "mpi/runtime.hpp"

#ifdef LOOM_HAVE_NCCL
#include <nccl.h>
#endif

namespace loom::tools {
namespace {

#ifdef LOOM_HAVE_NCCL
// NCCL's own ping-pong of the same bytes: the bar for contiguous messages.
struct Nccl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  Nccl(int me) {
    ncclUniqueId id;
    if (me == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (ncclCommInitRank(&comm, 2, id, me) != ncclSuccess) comm = nullptr;
    cudaStreamCreate(&stream);
  }
  ~Nccl() {
    if (comm) ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }
  void send(void* p, size_t n, int peer) {
    ncclSend(p, n, ncclChar, peer, comm, stream);
    cudaStreamSynchronize(stream);
  }
  void recv(void* p, size_t n, int peer) {
    ncclRecv(p, n, ncclChar, peer, comm, stream);
    cudaStreamSynchronize(stream);
  }
};
#endif

struct Case {
  std::string name;
  MPI_Datatype type;
  int count;
};

// Median one-way seconds of `reps` round trips of fn(send) / fn(recv).
template <class Send, class Recv>
double one_way(int me, int reps, Send&& send, Recv&& recv) {
  std::vector<double> t;
  for (int i = -2; i < reps; ++i) {  // two warm-ups
    MPI_Barrier(MPI_COMM_WORLD);
    auto a = std::chrono::steady_clock::now();
    if (me == 0) {
      send();
      recv();
    } else {
      recv();
      send();
    }
    auto b = std::chrono::steady_clock::now();
    if (i >= 0) t.push_back(std::chrono::duration<double>(b - a).count() / 2);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  double mine = t[t.size() / 2], out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

MPI_Datatype committed(MPI_Datatype t) {
  MPI_Type_commit(&t);
  return t;
}

// The irregular cases (indexed, struct), seeded so both ranks build the same.
void hand_cases(std::vector<Case>& out) {
  std::mt19937 rng(42);
  {  // an unstructured mesh's ghost list: 64 Ki doubles at sorted random places in 1 Mi
    std::vector<int> at(65536);
    std::uniform_int_distribution<int> d(0, (1 << 20) - 1);
    for (int& x : at) x = d(rng);
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    MPI_Datatype t;
    MPI_Type_create_indexed_block(static_cast<int>(at.size()), 1, at.data(), MPI_DOUBLE, &t);
    out.push_back({"HAND ghost list (8 B at random)", committed(t), 1});
  }
  {  // indexed with random block lengths of 1..64 ints and gaps of 0..64 ints
    std::vector<int> len, disp;
    std::uniform_int_distribution<int> l(1, 64), g(0, 64);
    int at = 0;
    for (int i = 0; i < 8192; ++i) {
      at += g(rng);
      disp.push_back(at);
      len.push_back(l(rng));
      at += len.back();
    }
    MPI_Datatype t;
    MPI_Type_indexed(8192, len.data(), disp.data(), MPI_INT, &t);
    out.push_back({"HAND indexed (1-64 ints)", committed(t), 1});
  }
  {  // particles: x, y, z (doubles) and id (int) of a 64-byte struct, 64 Ki of them
    int blens[2] = {3, 1};
    MPI_Aint disps[2] = {0, 40};
    MPI_Datatype types[2] = {MPI_DOUBLE, MPI_INT}, p, t;
    MPI_Type_create_struct(2, blens, disps, types, &p);
    MPI_Type_create_resized(p, 0, 64, &t);
    MPI_Type_free(&p);
    out.push_back({"HAND particles (struct, 28 of 64 B)", committed(t), 65536});
  }
  {  // a lower triangle of a 1024^2 double matrix, row by row
    std::vector<int> len(1024), disp(1024);
    for (int i = 0; i < 1024; ++i) {
      len[i] = i + 1;
      disp[i] = i * 1024;
    }
    MPI_Datatype t;
    MPI_Type_indexed(1024, len.data(), disp.data(), MPI_DOUBLE, &t);
    out.push_back({"HAND lower triangle (1024^2 doubles)", committed(t), 1});
  }
}

std::vector<Case> cases(bool quick) {
  std::vector<Case> out;
  const std::vector<int> contig =
      quick ? std::vector<int>{1, 4 << 10, 1 << 20, 16 << 20}
            : std::vector<int>{1,       64,      1 << 10,  16 << 10, 256 << 10,
                               1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20};
  for (int n : contig) out.push_back({"contiguous", MPI_BYTE, n});
  // 2D objects (TEMPI's): blocks of `b` bytes, every other block, `total` packed bytes.
  const std::vector<int> blocks =
      quick ? std::vector<int>{8, 256} : std::vector<int>{1, 8, 64, 512, 4096};
  const std::vector<int> totals =
      quick ? std::vector<int>{1 << 20}
            : std::vector<int>{1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  for (int b : blocks)
    for (int total : totals) {
      if (b > total / 4) continue;
      MPI_Datatype t;
      MPI_Type_vector(total / b, b, 2 * b, MPI_BYTE, &t);
      out.push_back({"2D block " + std::to_string(b) + " B", committed(t), 1});
    }
  // 3D: a y-z face (x = const) and an x-z face of a 256^3 float grid.
  for (int axis : {0, 1}) {
    int sz[3] = {256, 256, 256}, sub[3] = {256, 256, 256}, st[3] = {0, 0, 0};
    sub[2 - axis] = 1;
    MPI_Datatype t;
    MPI_Type_create_subarray(3, sz, sub, st, MPI_ORDER_C, MPI_FLOAT, &t);
    out.push_back(
        {axis == 0 ? "3D face x (4 B blocks)" : "3D face y (1 KiB blocks)", committed(t), 1});
  }
  if (!quick) hand_cases(out);
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// What the rows add up to, against the targets.
struct Summary {
  int rows = 0, auto_within_10 = 0;
  std::vector<double> pred_err;      // |predicted - measured| / measured, auto's method
  double sparse_vs_baseline = 1e30;  // min over 2D rows >= 1 MiB with blocks <= 64 B
  double nccl_bw = 1e30;             // min NCCL time / Loom time, contiguous >= 4 MiB

  void print() const {
    std::printf("\n## Summary\n\n");
    std::printf("- auto within 10%% of the fastest forced method: %d of %d rows (%.1f%%)\n",
                auto_within_10, rows, rows ? 100.0 * auto_within_10 / rows : 0.0);
    if (!pred_err.empty()) {
      int within = 0;
      for (double e : pred_err) within += e <= 0.2;
      std::printf(
          "- predicted vs measured, method auto chose: median error %.0f%%, p90 %.0f%%, max "
          "%.0f%%; within 20%%: %d of %zu rows (%.1f%%)\n",
          100 * percentile(pred_err, 0.5), 100 * percentile(pred_err, 0.9),
          100 * percentile(pred_err, 1.0), within, pred_err.size(),
          100.0 * within / static_cast<double>(pred_err.size()));
    } else {
      std::printf("- no profile: no predictions (run loom-measure first)\n");
    }
    if (sparse_vs_baseline < 1e30)
      std::printf(
          "- sparse 2D (blocks <= 64 B) >= 1 MiB: auto at least %.1fx faster than the "
          "baseline\n",
          sparse_vs_baseline);
    if (nccl_bw < 1e30)
      std::printf("- contiguous >= 4 MiB: Loom's bandwidth at least %.2f of NCCL's\n", nccl_bw);
  }
};

std::string cell(double measured_s, double predicted_us) {
  char b[64];
  if (measured_s <= 0) return "-";
  if (predicted_us >= 0)
    std::snprintf(b, sizeof b, "%.1f (%.1f)", measured_s * 1e6, predicted_us);
  else
    std::snprintf(b, sizeof b, "%.1f", measured_s * 1e6);
  return b;
}

// Cost of the cached method choice, as a send pays it.
double choice_ns() {
  Runtime* rt = runtime();
  mpi::TypeRegistry::Entry keep;
  transport::Message m;
  MPI_Datatype t;
  MPI_Type_vector(1024, 8, 16, MPI_BYTE, &t);
  MPI_Type_commit(&t);
  double ns = -1;
  if (rt && mpi::message_of(t, 4, &keep, &m) == MPI_SUCCESS) {
    const int n = 1000000;
    volatile int sink = 0;
    rt->choose(m, true, true);
    auto a = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) sink = sink + static_cast<int>(rt->choose(m, true, true));
    auto b = std::chrono::steady_clock::now();
    ns = std::chrono::duration<double, std::nano>(b - a).count() / n;
  }
  MPI_Type_free(&t);
  return ns;
}

}  // namespace

int bench_pingpong(bool quick, const char* csv_path) {
  int me = 0, n = 0, ngpu = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) {
    if (me == 0) std::fprintf(stderr, "pingpong needs 2 ranks\n");
    return 2;
  }
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
    if (me == 0) std::fprintf(stderr, "pingpong needs a GPU\n");
    return 2;
  }
  cudaSetDevice(me % ngpu);
  const bool have_device = loom_set_method("device") == MPI_SUCCESS;
  loom_set_method("auto");
  int peer_access = -1;
  if (ngpu > 1) cudaDeviceCanAccessPeer(&peer_access, me % ngpu, (me + 1) % ngpu);
#ifdef LOOM_HAVE_NCCL
  Nccl nccl(me);
  const bool have_nccl = nccl.comm != nullptr;
#else
  const bool have_nccl = false;
#endif
  const char* methods[] = {"oneshot", "staged", "device", "auto"};
  const char* picked_name[] = {"device", "oneshot", "staged"};
  const double choose_ns = choice_ns();
  FILE* csv = nullptr;
  if (me == 0 && csv_path) {
    csv = std::fopen(csv_path, "w");
    if (csv)
      std::fprintf(csv, "case,bytes,method,measured_us,predicted_us\n");
    else
      std::fprintf(stderr, "loom-bench: cannot write %s; no CSV\n", csv_path);
  }
  if (me == 0) {
    std::printf(
        "# one-way time, us (median), predicted in brackets; %d GPU(s), peer access %d, device "
        "method %s, NCCL %s, profile %s; cached method choice %.0f ns\n\n",
        ngpu, peer_access, have_device ? "on" : "off", have_nccl ? "on" : "off",
        runtime() && runtime()->model() ? "yes" : "none", choose_ns);
    std::printf(
        "| case | packed bytes | oneshot | staged | device | auto (picks) | baseline | auto / best "
        "| best vs baseline | NCCL | NCCL / auto |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  Summary sum;
  for (const Case& c : cases(quick)) {
    MPI_Aint lb, extent, tlb, textent;
    MPI_Type_get_extent(c.type, &lb, &extent);
    MPI_Type_get_true_extent(c.type, &tlb, &textent);
    int size = 0;
    MPI_Type_size(c.type, &size);
    const size_t span = static_cast<size_t>(tlb + textent + (c.count - 1) * extent);
    const size_t packed = static_cast<size_t>(size) * static_cast<size_t>(c.count);
    const int reps = quick ? 10 : (packed >= (16u << 20) ? 10 : packed >= (1u << 20) ? 30 : 100);
    cli::progress("loom-bench", "pingpong: %s, %zu bytes", c.name.c_str(), packed);
    void* dev = nullptr;
    cudaMalloc(&dev, span);
    cudaMemset(dev, me + 1, span);
    std::vector<char> host(span);
    const int peer = 1 - me;
    double pred[3] = {-1, -1, -1};  // device, oneshot, staged
    int picked = 2;
    loom_predict(c.type, c.count, 1, pred, &picked);
    double t[5] = {0, 0, 0, 0, 0};
    for (int m = 0; m < 4; ++m) {
      if (m == 2 && !have_device) continue;
      loom_set_method(methods[m]);
      t[m] = one_way(
          me, reps, [&] { MPI_Send(dev, c.count, c.type, peer, 1, MPI_COMM_WORLD); },
          [&] { MPI_Recv(dev, c.count, c.type, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); });
    }
    loom_set_method("auto");
    // The baseline: the whole extent through the host, the MPI's own datatype engine.
    t[4] = one_way(
        me, reps,
        [&] {
          cudaMemcpy(host.data(), dev, span, cudaMemcpyDeviceToHost);
          PMPI_Send(host.data(), c.count, c.type, peer, 1, MPI_COMM_WORLD);
        },
        [&] {
          PMPI_Recv(host.data(), c.count, c.type, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          cudaMemcpy(dev, host.data(), span, cudaMemcpyHostToDevice);
        });
    double t_nccl = 0;
#ifdef LOOM_HAVE_NCCL
    if (have_nccl && c.type == MPI_BYTE)
      t_nccl = one_way(
          me, reps, [&] { nccl.send(dev, packed, peer); }, [&] { nccl.recv(dev, packed, peer); });
#endif
    cudaFree(dev);
    if (me == 0) {
      double best = 1e30;
      for (int m = 0; m < 3; ++m)
        if (t[m] > 0) best = std::min(best, t[m]);
      char nccl_col[64] = "- | -";
      if (t_nccl > 0)
        std::snprintf(nccl_col, sizeof(nccl_col), "%.1f | %.2f", t_nccl * 1e6, t_nccl / t[3]);
      // The forced columns in the table's order (oneshot, staged, device) and their predictions.
      std::printf("| %s | %zu | %s | %s | %s | %.1f (%s) | %.1f | %.2f | %.1fx | %s |\n",
                  c.name.c_str(), packed, cell(t[0], pred[1]).c_str(), cell(t[1], pred[2]).c_str(),
                  cell(t[2], pred[0]).c_str(), t[3] * 1e6, picked_name[picked], t[4] * 1e6,
                  t[3] / best, t[4] / best, nccl_col);
      std::fflush(stdout);
      if (csv) {  // the forced methods (oneshot, staged, device) with their predictions, and auto
        const double p_of[3] = {pred[1], pred[2], pred[0]};
        for (int m = 0; m < 4; ++m)
          if (t[m] > 0)
            std::fprintf(csv, "\"%s\",%zu,%s,%.3f,%.3f\n", c.name.c_str(), packed, methods[m],
                         t[m] * 1e6, m < 3 ? p_of[m] : -1.0);
      }
      ++sum.rows;
      sum.auto_within_10 += t[3] <= 1.1 * best;
      const double measured_picked = t[picked == 0 ? 2 : picked == 1 ? 0 : 1];
      if (pred[picked] > 0 && measured_picked > 0)
        sum.pred_err.push_back(std::abs(pred[picked] - measured_picked * 1e6) /
                               (measured_picked * 1e6));
      if (c.name.rfind("2D block", 0) == 0 && packed >= (1u << 20) &&
          std::atoi(c.name.c_str() + 9) <= 64)
        sum.sparse_vs_baseline = std::min(sum.sparse_vs_baseline, t[4] / t[3]);
      if (t_nccl > 0 && packed >= (4u << 20)) sum.nccl_bw = std::min(sum.nccl_bw, t_nccl / t[3]);
    }
    if (c.type != MPI_BYTE) {
      MPI_Datatype tt = c.type;
      MPI_Type_free(&tt);
    }
  }
  if (me == 0) sum.print();
  if (csv) std::fclose(csv);
  return 0;
}

}  // namespace loom::tools

#else

namespace loom::tools {
int bench_pingpong(bool, const char*) {
  std::fprintf(stderr, "pingpong needs a CUDA build of Loom\n");
  return 2;
}
}  // namespace loom::tools

#endif
