// loom-bench pingpong: one-way time of a device message between two ranks,
// for each method forced (loom_set_method), auto, and the baseline a user
// without a CUDA-aware MPI writes today: copy the type's whole extent to the
// host, MPI with the datatype on host memory, copy the extent back.
// Run with 2 ranks (one GPU each, or sharing one).
#include "bench_pingpong.hpp"

#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>

#include "loom/loom.h"

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

std::vector<Case> cases(bool quick) {
  std::vector<Case> out;
  const std::vector<int> contig =
      quick ? std::vector<int>{4 << 10, 1 << 20, 16 << 20}
            : std::vector<int>{1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  for (int n : contig) out.push_back({"contiguous", MPI_BYTE, n});
  // 2D objects (TEMPI's): blocks of `b` bytes, every other block, `total` packed bytes.
  const std::vector<int> blocks =
      quick ? std::vector<int>{8, 256} : std::vector<int>{1, 8, 64, 512, 4096};
  const std::vector<int> totals =
      quick ? std::vector<int>{1 << 20} : std::vector<int>{16 << 10, 1 << 20, 16 << 20};
  for (int b : blocks)
    for (int total : totals) {
      MPI_Datatype t;
      MPI_Type_vector(total / b, b, 2 * b, MPI_BYTE, &t);
      MPI_Type_commit(&t);
      out.push_back({"2D block " + std::to_string(b) + " B", t, 1});
    }
  // 3D: a y-z face (x = const) and an x-z face of a 256^3 float grid.
  for (int axis : {0, 1}) {
    int sz[3] = {256, 256, 256}, sub[3] = {256, 256, 256}, st[3] = {0, 0, 0};
    sub[2 - axis] = 1;
    MPI_Datatype t;
    MPI_Type_create_subarray(3, sz, sub, st, MPI_ORDER_C, MPI_FLOAT, &t);
    MPI_Type_commit(&t);
    out.push_back({axis == 0 ? "3D face x (4 B blocks)" : "3D face y (1 KiB blocks)", t, 1});
  }
  return out;
}

}  // namespace

int bench_pingpong(bool quick) {
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
  int peer_access = -1;
  if (ngpu > 1) cudaDeviceCanAccessPeer(&peer_access, me % ngpu, (me + 1) % ngpu);
#ifdef LOOM_HAVE_NCCL
  Nccl nccl(me);
  const bool have_nccl = nccl.comm != nullptr;
#else
  const bool have_nccl = false;
#endif
  const char* methods[] = {"oneshot", "staged", "device", "auto"};
  if (me == 0) {
    std::printf(
        "# one-way time, us (median); %d GPU(s), peer access %d, device method %s, "
        "NCCL %s\n\n",
        ngpu, peer_access, have_device ? "on" : "off", have_nccl ? "on" : "off");
    std::printf(
        "| case | packed bytes | oneshot | staged | device | auto | baseline | auto / best | "
        "best vs baseline | NCCL | NCCL / auto |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const Case& c : cases(quick)) {
    MPI_Aint lb, extent, tlb, textent;
    MPI_Type_get_extent(c.type, &lb, &extent);
    MPI_Type_get_true_extent(c.type, &tlb, &textent);
    int size = 0;
    MPI_Type_size(c.type, &size);
    const size_t span = static_cast<size_t>(tlb + textent + (c.count - 1) * extent);
    const size_t packed = static_cast<size_t>(size) * static_cast<size_t>(c.count);
    const int reps = quick ? 10 : (packed >= (16u << 20) ? 20 : 100);
    void* dev = nullptr;
    cudaMalloc(&dev, span);
    cudaMemset(dev, me + 1, span);
    std::vector<char> host(span);
    const int peer = 1 - me;
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
      char dev_col[32] = "-";
      if (t[2] > 0) std::snprintf(dev_col, sizeof(dev_col), "%.1f", t[2] * 1e6);
      char nccl_col[64] = "- | -";
      if (t_nccl > 0)
        std::snprintf(nccl_col, sizeof(nccl_col), "%.1f | %.2f", t_nccl * 1e6, t_nccl / t[3]);
      std::printf("| %s | %zu | %.1f | %.1f | %s | %.1f | %.1f | %.2f | %.1fx | %s |\n",
                  c.name.c_str(), packed, t[0] * 1e6, t[1] * 1e6, dev_col, t[3] * 1e6, t[4] * 1e6,
                  t[3] / best, t[4] / best, nccl_col);
      std::fflush(stdout);
    }
    if (c.type != MPI_BYTE) {
      MPI_Datatype tt = c.type;
      MPI_Type_free(&tt);
    }
  }
  return 0;
}

}  // namespace loom::tools

#else

namespace loom::tools {
int bench_pingpong(bool) {
  std::fprintf(stderr, "pingpong needs a CUDA build of Loom\n");
  return 2;
}
}  // namespace loom::tools

#endif
