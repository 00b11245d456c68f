// loom-bench coll: collectives on device buffers, Loom (auto, the node-local
// engine, the MPI's own collective on host mirrors) beside what a user
// without a GPU-aware MPI writes: *user-level* (copy the whole send buffer
// to pinned host memory, the host MPI's collective, copy the result back)
// and, for all-to-all, *send-recv* (MPI_Isend/Irecv of each device block
// through Loom's point-to-point). Alltoall, Alltoallv (uneven blocks),
// Allreduce, Bcast, Allgather, Reduce_scatter_block, Scan and the 3D halo's
// Neighbor_alltoallw. The bound is the GPU's own copy rate:
// all ranks' received bytes copied once device to device (the ranks share
// the GPU under MPS; with a GPU each it is a lower bound still). Times are
// the median over iterations of the slowest rank's time.
#include "bench_coll.hpp"

#include "cli.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <functional>
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

int g_rank = 0, g_size = 1;
size_t g_from = 0;              // --from: smaller sizes are skipped
const char* g_second = "node";  // --second: the method of the "node" column

#ifdef LOOM_HAVE_NCCL
// NCCL on MPI_COMM_WORLD, where every rank has a GPU of its own (it refuses
// two ranks on one GPU); comm stays null otherwise.
struct Nccl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  explicit Nccl(int gpus) {
    int ok = gpus >= g_size ? 1 : 0, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) return;
    ncclUniqueId id;
    if (g_rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (ncclCommInitRank(&comm, g_size, id, g_rank) != ncclSuccess) comm = nullptr;
    cudaStreamCreate(&stream);
  }
  ~Nccl() {
    if (comm) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }
  // `per` bytes to and from each rank, blocks one after the other.
  void alltoall(const void* in, void* out, size_t per) {
    ncclGroupStart();
    for (int p = 0; p < g_size; ++p) {
      ncclSend(static_cast<const char*>(in) + p * per, per, ncclUint8, p, comm, stream);
      ncclRecv(static_cast<char*>(out) + p * per, per, ncclUint8, p, comm, stream);
    }
    ncclGroupEnd();
  }
  void sync() { cudaStreamSynchronize(stream); }
};
Nccl* g_nccl = nullptr;
// Seconds of one NCCL call (fn enqueues it), or 0 where NCCL is off.
double nccl_timed(int reps, const std::function<void(Nccl&)>& fn);
#endif

// Median of the slowest rank's seconds per call.
double timed(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = -2; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto a = std::chrono::steady_clock::now();
    fn();
    double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count(), all;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 0) t.push_back(all);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

int reps_for(size_t bytes) {
  return bytes >= (size_t{64} << 20) ? 5 : bytes >= (size_t{4} << 20) ? 10 : 30;
}

// The GPU's device-to-device copy rate (bytes/s) for copies of `bytes`.
double d2d_rate(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  auto t = std::chrono::steady_clock::now();
  const int n = 10;
  for (int i = 0; i < n; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  cudaFree(a);
  cudaFree(b);
  return static_cast<double>(bytes) * n / s;
}

struct Bufs {
  void *dsend = nullptr, *drecv = nullptr, *hsend = nullptr, *hrecv = nullptr;
  size_t send_bytes, recv_bytes;
  Bufs(size_t s, size_t r) : send_bytes(s), recv_bytes(r) {
    cudaMalloc(&dsend, s);
    cudaMalloc(&drecv, r);
    cudaMallocHost(&hsend, s);
    cudaMallocHost(&hrecv, r);
    cudaMemset(dsend, 1, s);
    cudaMemset(drecv, 0, r);
    cudaDeviceSynchronize();
  }
  ~Bufs() {
    cudaFree(dsend);
    cudaFree(drecv);
    cudaFreeHost(hsend);
    cudaFreeHost(hrecv);
  }
  // User-level: the whole send buffer down, `host` on the copies, the result up.
  void user_level(const std::function<void(void*, void*)>& host) {
    cudaMemcpy(hsend, dsend, send_bytes, cudaMemcpyDeviceToHost);
    host(hsend, hrecv);
    cudaMemcpy(drecv, hrecv, recv_bytes, cudaMemcpyHostToDevice);
  }
};

struct Row {
  std::string op;
  size_t bytes;  // each rank receives
  double aut, node, mirror, user, sendrecv, bound;
  double nccl = 0;  // NCCL called directly (or the user's pack + NCCL + unpack)
};

void print(const std::vector<Row>& rows, FILE* csv) {
  if (g_rank != 0) return;
  std::printf(
      "\n| collective | bytes/rank | Loom auto us | %s us | mirrors us | user-level us "
      "| send-recv us | NCCL us | bound us | auto vs user | auto vs send-recv | NCCL / auto "
      "| %% of bound |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
      "|\n",
      std::strcmp(g_second, "node") == 0 ? "node engine" : g_second);
  for (const Row& r : rows) {
    char sr[32] = "-", vs_sr[32] = "-", nc[32] = "-", vs_nc[32] = "-";
    if (r.nccl > 0) {
      std::snprintf(nc, sizeof nc, "%.1f", r.nccl * 1e6);
      std::snprintf(vs_nc, sizeof vs_nc, "%.2f", r.nccl / r.aut);
    }
    if (r.sendrecv > 0) {
      std::snprintf(sr, sizeof sr, "%.1f", r.sendrecv * 1e6);
      std::snprintf(vs_sr, sizeof vs_sr, "%.2fx", r.sendrecv / r.aut);
    }
    std::printf(
        "| %s | %zu | %.1f | %.1f | %.1f | %.1f | %s | %s | %.1f | %.2fx | %s | %s | %.0f%% |\n",
        r.op.c_str(), r.bytes, r.aut * 1e6, r.node * 1e6, r.mirror * 1e6, r.user * 1e6, sr, nc,
        r.bound * 1e6, r.user / r.aut, vs_sr, vs_nc, 100 * r.bound / r.aut);
    if (csv)
      std::fprintf(csv, "%s,%d,%zu,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", r.op.c_str(), g_size,
                   r.bytes, r.aut, r.node, r.mirror, r.user, r.sendrecv > 0 ? r.sendrecv : 0,
                   r.bound, r.nccl);
  }
  std::fflush(stdout);
}

#ifdef LOOM_HAVE_NCCL
double nccl_timed(int reps, const std::function<void(Nccl&)>& fn) {
  if (!g_nccl || !g_nccl->comm) return 0;
  return timed(reps, [&] {
    fn(*g_nccl);
    g_nccl->sync();
  });
}
#define LOOM_NCCL_ROW(row, reps, body) row.nccl = nccl_timed(reps, [&](Nccl & nc) body)
#else
#define LOOM_NCCL_ROW(row, reps, body) (void)0
#endif

// Loom's three ways of one call, forced in turn.
void loom_modes(Row& row, int reps, const std::function<void()>& fn) {
  loom_set_coll_method("auto");
  row.aut = timed(reps, fn);
  loom_set_coll_method(g_second);
  row.node = timed(reps, fn);
  loom_set_coll_method("mirror");
  row.mirror = timed(reps, fn);
  loom_set_coll_method("auto");
}

// An all-to-all of a strided type: `k` doubles to each peer, every other
// one of 2k (a vector resized to its full extent). Loom takes the type;
// the user's NCCL version packs with cudaMemcpy2D, sends, and unpacks.
void strided_alltoall(int k, double rate, std::vector<Row>& rows) {
  MPI_Datatype v, t;
  MPI_Type_vector(k, 1, 2, MPI_DOUBLE, &v);
  MPI_Type_create_resized(v, 0, static_cast<MPI_Aint>(16) * k, &t);
  MPI_Type_commit(&t);
  const size_t per = size_t{8} * k, n = static_cast<size_t>(g_size);
  Bufs b(2 * per * n, 2 * per * n);
  Row row{
      "Alltoall strided (vector)", per * n, 0, 0, 0, 0, 0, static_cast<double>(per * n) * n / rate};
  const int reps = reps_for(per * n);
  loom_modes(row, reps, [&] { MPI_Alltoall(b.dsend, 1, t, b.drecv, 1, t, MPI_COMM_WORLD); });
  row.user = timed(reps, [&] {
    b.user_level([&](void* s, void* r) { MPI_Alltoall(s, 1, t, r, 1, t, MPI_COMM_WORLD); });
  });
#ifdef LOOM_HAVE_NCCL
  if (g_nccl && g_nccl->comm) {
    void *pin = nullptr, *pout = nullptr;
    cudaMalloc(&pin, per * n);
    cudaMalloc(&pout, per * n);
    row.nccl = nccl_timed(reps, [&](Nccl& nc) {
      cudaMemcpy2DAsync(pin, 8, b.dsend, 16, 8, k * n, cudaMemcpyDeviceToDevice, nc.stream);
      nc.alltoall(pin, pout, per);
      cudaMemcpy2DAsync(b.drecv, 16, pout, 8, 8, k * n, cudaMemcpyDeviceToDevice, nc.stream);
    });
    cudaFree(pin);
    cudaFree(pout);
  }
#endif
  rows.push_back(row);
  MPI_Type_free(&t);
  MPI_Type_free(&v);
}

// An Alltoallv out of a strided layout into contiguous doubles (the
// transpose of a distributed FFT): to peer p, k or 2k doubles (uneven as
// in the Alltoallv rows), every other one of their span.
void strided_alltoallv(int k, double rate, std::vector<Row>& rows) {
  MPI_Datatype v, t;  // one double of every two
  MPI_Type_vector(1, 1, 2, MPI_DOUBLE, &v);
  MPI_Type_create_resized(v, 0, 16, &t);
  MPI_Type_commit(&t);
  const int n = g_size;
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  size_t total = 0;  // doubles
  for (int p = 0; p < n; ++p) {
    sc[p] = rc[p] = k * (1 + (g_rank + p) % 2);
    sd[p] = rd[p] = static_cast<int>(total);
    total += static_cast<size_t>(sc[p]);
  }
  Bufs b(16 * total, 8 * total);
  size_t most = 8 * total;  // the bound: the largest rank's bytes, on every rank
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
  Row row{"Alltoallv strided (vector)",        8 * total, 0, 0, 0, 0, 0,
          static_cast<double>(most) * n / rate};
  auto call = [&](const void* s, void* r) {
    MPI_Alltoallv(s, sc.data(), sd.data(), t, r, rc.data(), rd.data(), MPI_DOUBLE, MPI_COMM_WORLD);
  };
  const int reps = reps_for(8 * total);
  loom_modes(row, reps, [&] { call(b.dsend, b.drecv); });
  row.user = timed(reps, [&] { b.user_level(call); });
  rows.push_back(row);
  MPI_Type_free(&t);
  MPI_Type_free(&v);
}

// MPI_Neighbor_alltoallw of a 3D halo (radius 1, faces) on a periodic
// Cartesian grid of ranks: each rank's m^3 doubles plus halo, one subarray
// type per face, as TEMPI's benchmark does.
void halo(int m, double rate, FILE* csv) {
  int dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1};
  MPI_Dims_create(g_size, 3, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
  const int e = m + 2, sizes[3] = {e, e, e};
  std::vector<MPI_Datatype> st(6), rt(6);
  for (int d = 0; d < 3; ++d)
    for (int side = 0; side < 2; ++side) {  // the neighbour below, then above
      int sub[3] = {m, m, m}, at_s[3] = {1, 1, 1}, at_r[3] = {1, 1, 1};
      sub[d] = 1;
      at_s[d] = side == 0 ? 1 : m;      // the face of the interior next to it
      at_r[d] = side == 0 ? 0 : m + 1;  // its halo
      MPI_Type_create_subarray(3, sizes, sub, at_s, MPI_ORDER_C, MPI_DOUBLE, &st[2 * d + side]);
      MPI_Type_create_subarray(3, sizes, sub, at_r, MPI_ORDER_C, MPI_DOUBLE, &rt[2 * d + side]);
      MPI_Type_commit(&st[2 * d + side]);
      MPI_Type_commit(&rt[2 * d + side]);
    }
  std::vector<int> ones(6, 1);
  std::vector<MPI_Aint> zero(6, 0);
  const size_t bytes = size_t{8} * e * e * e;
  Bufs b(bytes, bytes);
  Row row{"Neighbor_alltoallw 3D halo " + std::to_string(m) + "^3",
          size_t{6} * m * m * 8,
          0,
          0,
          0,
          0,
          0,
          0};
  const int reps = 20;
  loom_modes(row, reps, [&] {
    MPI_Neighbor_alltoallw(b.dsend, ones.data(), zero.data(), st.data(), b.dsend, ones.data(),
                           zero.data(), rt.data(), cart);
  });
  row.user = timed(reps, [&] {  // the whole grid down and up
    cudaMemcpy(b.hsend, b.dsend, bytes, cudaMemcpyDeviceToHost);
    MPI_Neighbor_alltoallw(b.hsend, ones.data(), zero.data(), st.data(), b.hsend, ones.data(),
                           zero.data(), rt.data(), cart);
    cudaMemcpy(b.dsend, b.hsend, bytes, cudaMemcpyHostToDevice);
  });
  row.bound = static_cast<double>(row.bytes) * g_size / rate;
  print({row}, csv);
  for (auto* v : {&st, &rt})
    for (MPI_Datatype& t : *v) MPI_Type_free(&t);
  MPI_Comm_free(&cart);
}

// The nonblocking forms, each MPI_I... followed by MPI_Wait. Columns:
// `auto` Loom's schedule of point-to-point messages (coll_schedule.hpp),
// `mirror` the MPI's own on host mirrors (what every nonblocking call on
// device buffers did before the schedules), `node` the blocking call in
// auto mode (the schedule's cost against the blocking engines), `user`
// the user-level path.
void nonblocking(size_t top, size_t big, double rate, FILE* csv) {
  const int n = g_size;
  std::vector<Row> rows;
  auto wait = [](MPI_Request q) { MPI_Wait(&q, MPI_STATUS_IGNORE); };
  auto both = [](Row& row, int reps, const std::function<void()>& fn) {
    loom_set_coll_method("auto");
    row.aut = timed(reps, fn);
    loom_set_coll_method("mirror");
    row.mirror = timed(reps, fn);
    loom_set_coll_method("auto");
  };
  for (size_t per = 4096; per <= top; per *= 8) {
    if (per * n < g_from) continue;
    cli::progress("loom-bench", "coll: Ialltoall, %zu bytes a peer", per);
    Bufs b(per * n, per * n);
    const int c = static_cast<int>(per);
    const int reps = reps_for(per * n);
    Row row{"Ialltoall", per * n, 0, 0, 0, 0, 0, static_cast<double>(per * n) * n / rate};
    both(row, reps, [&] {
      MPI_Request q;
      MPI_Ialltoall(b.dsend, c, MPI_BYTE, b.drecv, c, MPI_BYTE, MPI_COMM_WORLD, &q);
      wait(q);
    });
    row.node = timed(
        reps, [&] { MPI_Alltoall(b.dsend, c, MPI_BYTE, b.drecv, c, MPI_BYTE, MPI_COMM_WORLD); });
    row.user = timed(reps, [&] {
      b.user_level([&](void* s, void* r) {
        MPI_Request q;
        MPI_Ialltoall(s, c, MPI_BYTE, r, c, MPI_BYTE, MPI_COMM_WORLD, &q);
        wait(q);
      });
    });
    rows.push_back(row);
  }
  for (size_t bytes = 4096; bytes <= big; bytes *= 16) {
    if (bytes < g_from) continue;
    cli::progress("loom-bench", "coll: Iallreduce, %zu bytes", bytes);
    Bufs b(bytes, bytes);
    const int count = static_cast<int>(bytes / sizeof(float));
    const int reps = reps_for(bytes);
    Row row{"Iallreduce float sum", bytes, 0, 0, 0, 0, 0, static_cast<double>(bytes) * n / rate};
    both(row, reps, [&] {
      MPI_Request q;
      MPI_Iallreduce(b.dsend, b.drecv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
      wait(q);
    });
    row.node = timed(
        reps, [&] { MPI_Allreduce(b.dsend, b.drecv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
    row.user = timed(reps, [&] {
      b.user_level([&](void* s, void* r) {
        MPI_Request q;
        MPI_Iallreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
        wait(q);
      });
    });
    rows.push_back(row);
  }
  print(rows, csv);
}

}  // namespace

int bench_coll(bool quick, const char* csv_path, bool nonblocking_only, size_t from,
               const char* second) {
  g_from = from;
  g_second = second;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  // A GPU a rank where there are enough (one node); else ranks share them.
  // Without this every rank ran on GPU 0: on 2 GPUs, without MPS, the GPU
  // time-sliced between the two processes (about 145 us a switch).
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) cudaSetDevice(g_rank % gpus);
#ifdef LOOM_HAVE_NCCL
  Nccl nccl(gpus);
  g_nccl = &nccl;
#endif
  const int n = g_size;
  // The copy rate of the GPU alone: rank 0 measures while the others wait.
  double rate = 0;
  if (g_rank == 0) rate = d2d_rate(size_t{256} << 20);
  MPI_Bcast(&rate, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  FILE* csv = nullptr;
  if (g_rank == 0 && csv_path) {
    csv = std::fopen(csv_path, "w");
    if (csv)
      std::fprintf(csv, "op,ranks,bytes,auto,node,mirror,user,sendrecv,bound,nccl\n");
    else
      std::fprintf(stderr, "loom-bench: cannot write %s; no CSV\n", csv_path);
  }
  if (g_rank == 0)
    std::printf("loom-bench coll: %d ranks; device-to-device copy rate %.0f GB/s\n", n, rate / 1e9);
  const size_t top = quick ? (size_t{4} << 20) : (size_t{16} << 20);
  const size_t big = quick ? (size_t{16} << 20) : (size_t{256} << 20);
  std::vector<Row> rows;
  if (nonblocking_only) {
    nonblocking(top, big, rate, csv);
    if (csv) std::fclose(csv);
    return 0;
  }

  // Alltoall: `per` bytes to and from each peer.
  for (size_t per = 1024; per <= top; per *= 4) {
    if (per * n < g_from) continue;
    cli::progress("loom-bench", "coll: Alltoall, %zu bytes a peer", per);
    Bufs b(per * n, per * n);
    const int c = static_cast<int>(per);
    Row row{"Alltoall", per * n, 0, 0, 0, 0, 0, static_cast<double>(per * n) * n / rate};
    loom_modes(row, reps_for(per * n),
               [&] { MPI_Alltoall(b.dsend, c, MPI_BYTE, b.drecv, c, MPI_BYTE, MPI_COMM_WORLD); });
    row.user = timed(reps_for(per * n), [&] {
      b.user_level(
          [&](void* s, void* r) { MPI_Alltoall(s, c, MPI_BYTE, r, c, MPI_BYTE, MPI_COMM_WORLD); });
    });
    row.sendrecv = timed(reps_for(per * n), [&] {
      std::vector<MPI_Request> q(2 * n);
      for (int p = 0; p < n; ++p)
        MPI_Irecv(static_cast<char*>(b.drecv) + p * per, c, MPI_BYTE, p, 7, MPI_COMM_WORLD, &q[p]);
      for (int p = 0; p < n; ++p)
        MPI_Isend(static_cast<char*>(b.dsend) + p * per, c, MPI_BYTE, p, 7, MPI_COMM_WORLD,
                  &q[n + p]);
      MPI_Waitall(2 * n, q.data(), MPI_STATUSES_IGNORE);
    });
    LOOM_NCCL_ROW(row, reps_for(per * n), { nc.alltoall(b.dsend, b.drecv, per); });
    rows.push_back(row);
  }
  print(rows, csv);
  rows.clear();
  for (int k = 128; k <= static_cast<int>(top / 8); k *= 16)
    if (size_t{8} * k * n >= g_from) strided_alltoall(k, rate, rows);
  print(rows, csv);
  rows.clear();

  for (int k = 128; k <= static_cast<int>(top / 8); k *= 16)
    if (size_t{8} * k * n >= g_from) strided_alltoallv(k, rate, rows);
  print(rows, csv);
  rows.clear();

  // Alltoallv: `per` or 2 `per` bytes between each pair of ranks (the same
  // both ways), blocks packed one after the other.
  for (size_t per = 1024; per <= top; per *= 4) {
    if (per * n < g_from) continue;
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    size_t total = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = rc[p] = static_cast<int>(per * (1 + (g_rank + p) % 2));
      sd[p] = rd[p] = static_cast<int>(total);
      total += static_cast<size_t>(sc[p]);
    }
    Bufs b(total, total);
    size_t most = total;  // the bound: the largest rank's bytes, on every rank
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
    Row row{"Alltoallv", total, 0, 0, 0, 0, 0, static_cast<double>(most) * n / rate};
    auto call = [&](const void* s, void* r) {
      MPI_Alltoallv(s, sc.data(), sd.data(), MPI_BYTE, r, rc.data(), rd.data(), MPI_BYTE,
                    MPI_COMM_WORLD);
    };
    loom_modes(row, reps_for(total), [&] { call(b.dsend, b.drecv); });
    row.user = timed(reps_for(total), [&] { b.user_level(call); });
    rows.push_back(row);
  }
  print(rows, csv);
  rows.clear();

  // Allreduce (float sum), Bcast, Scan, Allgather, Reduce_scatter_block.
  // 4 B to 16 MiB in steps of 16 (32 below 4 KiB), then 64 and 256 MiB.
  for (size_t bytes = 4; bytes <= big; bytes *= (bytes < 4096                 ? 32
                                                 : bytes < (size_t{16} << 20) ? 16
                                                                              : 4)) {
    if (bytes < g_from) continue;
    const int count = static_cast<int>(bytes / sizeof(float));
    const int reps = reps_for(bytes);
    cli::progress("loom-bench", "coll: Allreduce, Bcast, Allgather, Reduce_scatter, %zu bytes",
                  bytes);
    {
      Bufs b(bytes, bytes);
      Row row{"Allreduce float sum", bytes, 0, 0, 0, 0, 0, static_cast<double>(bytes) * n / rate};
      loom_modes(row, reps, [&] {
        MPI_Allreduce(b.dsend, b.drecv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      });
      row.user = timed(reps, [&] {
        b.user_level([&](void* s, void* r) {
          MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        });
      });
      LOOM_NCCL_ROW(row, reps, {
        ncclAllReduce(b.dsend, b.drecv, count, ncclFloat, ncclSum, nc.comm, nc.stream);
      });
      rows.push_back(row);
    }
    {
      Bufs b(bytes, bytes);
      Row row{"Bcast", bytes, 0, 0, 0, 0, 0, static_cast<double>(bytes) * (n - 1) / rate};
      loom_modes(row, reps, [&] { MPI_Bcast(b.drecv, count, MPI_FLOAT, 0, MPI_COMM_WORLD); });
      row.user = timed(reps, [&] {  // the root copies down, the others copy up
        if (g_rank == 0) cudaMemcpy(b.hrecv, b.drecv, bytes, cudaMemcpyDeviceToHost);
        MPI_Bcast(b.hrecv, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        if (g_rank != 0) cudaMemcpy(b.drecv, b.hrecv, bytes, cudaMemcpyHostToDevice);
      });
      LOOM_NCCL_ROW(row, reps,
                    { ncclBroadcast(b.drecv, b.drecv, count, ncclFloat, 0, nc.comm, nc.stream); });
      rows.push_back(row);
    }
    {
      // Scan: the last rank folds every rank's input, so it bounds the call.
      Bufs b(bytes, bytes);
      Row row{"Scan float sum", bytes, 0, 0, 0, 0, 0, static_cast<double>(bytes) * n / rate};
      loom_modes(row, reps,
                 [&] { MPI_Scan(b.dsend, b.drecv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
      row.user = timed(reps, [&] {
        b.user_level(
            [&](void* s, void* r) { MPI_Scan(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
      });
      rows.push_back(row);
    }
    if (bytes % n == 0 || bytes >= 4096) {
      const size_t blk = bytes / n / sizeof(float) * sizeof(float);
      const int bc = static_cast<int>(blk / sizeof(float));
      if (blk > 0) {
        Bufs b(blk, blk * n);
        Row row{"Allgather", blk * n, 0, 0, 0, 0, 0, static_cast<double>(blk * n) * n / rate};
        loom_modes(row, reps, [&] {
          MPI_Allgather(b.dsend, bc, MPI_FLOAT, b.drecv, bc, MPI_FLOAT, MPI_COMM_WORLD);
        });
        row.user = timed(reps, [&] {
          b.user_level([&](void* s, void* r) {
            MPI_Allgather(s, bc, MPI_FLOAT, r, bc, MPI_FLOAT, MPI_COMM_WORLD);
          });
        });
        LOOM_NCCL_ROW(row, reps, {
          ncclAllGather(b.dsend, b.drecv, static_cast<size_t>(bc), ncclFloat, nc.comm, nc.stream);
        });
        rows.push_back(row);
      }
      if (blk > 0) {
        Bufs b(blk * n, blk);
        Row row{"Reduce_scatter_block float sum",       blk, 0, 0, 0, 0, 0,
                static_cast<double>(blk * n) * n / rate};
        loom_modes(row, reps, [&] {
          MPI_Reduce_scatter_block(b.dsend, b.drecv, bc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        });
        row.user = timed(reps, [&] {
          b.user_level([&](void* s, void* r) {
            MPI_Reduce_scatter_block(s, r, bc, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          });
        });
        LOOM_NCCL_ROW(row, reps, {
          ncclReduceScatter(b.dsend, b.drecv, static_cast<size_t>(bc), ncclFloat, ncclSum, nc.comm,
                            nc.stream);
        });
        rows.push_back(row);
      }
    }
  }
  print(rows, csv);
  rows.clear();
  // From --from bytes, faces of at least that many (192^3: 1.7 MiB a rank).
  if (g_from == 0)
    halo(quick ? 32 : 64, rate, csv);
  else if (size_t{6} * 192 * 192 * 8 >= g_from)
    halo(192, rate, csv);
  nonblocking(top, big, rate, csv);
  if (csv) std::fclose(csv);
#ifdef LOOM_HAVE_NCCL
  g_nccl = nullptr;
#endif
  return 0;
}

}  // namespace loom::tools

#else

namespace loom::tools {
int bench_coll(bool, const char*, bool, size_t, const char*) {
  std::fprintf(stderr, "loom-bench coll needs a CUDA build\n");
  return 1;
}
}  // namespace loom::tools

#endif
