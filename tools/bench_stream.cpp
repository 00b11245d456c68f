// loom-bench stream: a GPU ping-pong with a small compute kernel before each
// send, three ways (2 ranks):
//   CPU-driven: kernel; cudaStreamSynchronize; MPI_Send / MPI_Recv through
//               Loom; the next kernel;
//   MPIX:       kernel; MPIX_Send_enqueue / MPIX_Recv_enqueue on the same
//               stream; the host only enqueues (and waits once a window);
//   MPIS:       the same with MPIS requests matched once, started per round.
// Each cell is the time of one round trip (kernel, send, receive on both
// sides), the enqueued ones with the ratio to CPU-driven (the target
// is <= 0.50 from 4 KiB to 1 MiB), and the stream engine's host-side actions
// (MPI operations posted and completions handled) per round trip.
// Without a GPU, in the host test mode (LOOM_TEST_HOST_AS_DEVICE=1), it runs
// on an emulated stream with a host function as the kernel: a check of the
// benchmark itself, not a measurement.
#include "bench_stream.hpp"

#include "cli.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/stream.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "bench_stream_kernel.hpp"
#endif

namespace loom::tools {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

long long actions() {
  long long n = 0;
  loom_stream_host_actions(&n);
  return n;
}

std::string size_name(size_t n) {
  char b[32];
  if (n >= (1u << 20))
    std::snprintf(b, sizeof b, "%zu MiB", n >> 20);
  else if (n >= 1024)
    std::snprintf(b, sizeof b, "%zu KiB", n >> 10);
  else
    std::snprintf(b, sizeof b, "%zu B", n);
  return b;
}

struct Setup {
  int me = 0, peer = 1;
  bool emulated = false;
  void* s = nullptr;  // a cudaStream_t, or an emulated stream
  MPIX_Stream stream = MPIX_STREAM_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  MPIS_Queue q = MPIS_QUEUE_NULL;
  void *src = nullptr, *dst = nullptr;
};

void host_touch(void* buf) {
  ++*static_cast<int*>(buf);
}

// The small compute kernel on the stream.
void touch(Setup& x, void* buf, int i) {
#ifdef LOOM_HAVE_CUDA
  if (!x.emulated) {
    launch_touch(buf, i, static_cast<cudaStream_t>(x.s));
    return;
  }
#endif
  (void)i;
  loom_stream_launch_host(x.s, host_touch, buf);
}

void sync(Setup& x) {
  loom_stream_synchronize(x.s);
}

// Host time spent in the enqueue calls (the application thread's cost of
// stream-triggered communication), summed over a loop's iterations.
struct HostTime {
  double sum = 0, at = 0;
  void begin() { at = now(); }
  void end() { sum += now() - at; }
};

// Round trips of `iters` iterations, the host enqueueing up to `window` of
// them before it waits for the stream (the staging of enqueued sends lives
// until they are done).
double cpu_driven(Setup& x, size_t n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    if (x.me == 0) {
      touch(x, x.src, i);
      sync(x);
      MPI_Send(x.src, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD);
      MPI_Recv(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      touch(x, x.dst, i);
      sync(x);
      MPI_Send(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD);
    }
  }
  sync(x);
  return (now() - t0) / iters;
}

double mpix(Setup& x, size_t n, int iters, int window, HostTime* ht) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    if (x.me == 0) {
      touch(x, x.src, i);
      ht->begin();
      MPIX_Send_enqueue(x.src, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm);
      MPIX_Recv_enqueue(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm, MPI_STATUS_IGNORE);
      ht->end();
    } else {
      ht->begin();
      MPIX_Recv_enqueue(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm, MPI_STATUS_IGNORE);
      ht->end();
      touch(x, x.dst, i);
      ht->begin();
      MPIX_Send_enqueue(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm);
      ht->end();
    }
    if ((i + 1) % window == 0) sync(x);
  }
  sync(x);
  return (now() - t0) / iters;
}

double mpis(Setup& x, size_t n, int iters, int window, HostTime* ht) {
  MPIS_Request send, recv;
  MPIS_Send_init(x.me == 0 ? x.src : x.dst, static_cast<MPI_Count>(n), MPI_BYTE, x.peer, 1, x.comm,
                 MPI_INFO_NULL, &send);
  MPIS_Recv_init(x.dst, static_cast<MPI_Count>(n), MPI_BYTE, x.peer, 1, x.comm, MPI_INFO_NULL,
                 &recv);
  MPIS_Request both[2] = {send, recv};
  MPIS_Matchall(2, both, MPI_STATUSES_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    if (x.me == 0) {
      touch(x, x.src, i);
      ht->begin();
      MPIS_Enqueue_start(x.q, &send);
      MPIS_Enqueue_waitall(x.q);
      MPIS_Enqueue_start(x.q, &recv);
      MPIS_Enqueue_waitall(x.q);
      ht->end();
    } else {
      ht->begin();
      MPIS_Enqueue_start(x.q, &recv);
      MPIS_Enqueue_waitall(x.q);
      ht->end();
      touch(x, x.dst, i);
      ht->begin();
      MPIS_Enqueue_start(x.q, &send);
      MPIS_Enqueue_waitall(x.q);
      ht->end();
    }
    if ((i + 1) % window == 0) sync(x);
  }
  MPIS_Queue_wait(x.q);
  const double t = (now() - t0) / iters;
  MPIS_Request_free(&send);
  MPIS_Request_free(&recv);
  return t;
}

double slowest(double t) {
  double out = 0;
  MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// ---- Halo exchange, in the style of the paper's Cabana gather/scatter:
// a periodic 3D grid of ranks, each with an n^3 block of doubles and a halo
// one cell wide, exchanging with its 26 neighbours through subarray types
// (Loom packs and unpacks them: on the stream when enqueued), a compute
// kernel between exchanges. ----

struct Halo {
  std::vector<MPI_Datatype> send_t, recv_t;
  std::vector<int> peer, send_tag, recv_tag;
  void* grid = nullptr;
};

int dir_index(int dx, int dy, int dz) {
  return (dx + 1) * 9 + (dy + 1) * 3 + (dz + 1);
}

Halo make_halo(int n) {
  Halo h;
  int size = 0, dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1}, me = 0, coords[3];
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Dims_create(size, 3, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
  MPI_Comm_rank(cart, &me);
  MPI_Cart_coords(cart, me, 3, coords);
  const int full[3] = {n + 2, n + 2, n + 2};
  for (int dx = -1; dx <= 1; ++dx)
    for (int dy = -1; dy <= 1; ++dy)
      for (int dz = -1; dz <= 1; ++dz) {
        if (dx == 0 && dy == 0 && dz == 0) continue;
        const int d[3] = {dx, dy, dz};
        int sub[3], s_at[3], r_at[3], c[3];
        for (int k = 0; k < 3; ++k) {
          sub[k] = d[k] == 0 ? n : 1;
          s_at[k] = d[k] == 1 ? n : 1;
          r_at[k] = d[k] == -1 ? 0 : d[k] == 1 ? n + 1 : 1;
          c[k] = coords[k] + d[k];
        }
        MPI_Datatype st, rt;
        MPI_Type_create_subarray(3, full, sub, s_at, MPI_ORDER_C, MPI_DOUBLE, &st);
        MPI_Type_create_subarray(3, full, sub, r_at, MPI_ORDER_C, MPI_DOUBLE, &rt);
        MPI_Type_commit(&st);
        MPI_Type_commit(&rt);
        int rank = 0;
        MPI_Cart_rank(cart, c, &rank);  // periodic: wraps around
        h.send_t.push_back(st);
        h.recv_t.push_back(rt);
        h.peer.push_back(rank);
        // The neighbour in direction d sends toward -d: its tag names -d.
        h.send_tag.push_back(dir_index(dx, dy, dz));
        h.recv_tag.push_back(dir_index(-dx, -dy, -dz));
      }
  MPI_Comm_free(&cart);
  return h;
}

void free_halo(Halo& h) {
  for (auto& t : h.send_t) MPI_Type_free(&t);
  for (auto& t : h.recv_t) MPI_Type_free(&t);
}

double halo_cpu(Setup& x, Halo& h, int iters) {
  const int k = static_cast<int>(h.peer.size());
  std::vector<MPI_Request> r(2 * k);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    touch(x, h.grid, i);
    sync(x);
    for (int j = 0; j < k; ++j)
      MPI_Irecv(h.grid, 1, h.recv_t[j], h.peer[j], h.recv_tag[j], MPI_COMM_WORLD, &r[j]);
    for (int j = 0; j < k; ++j)
      MPI_Isend(h.grid, 1, h.send_t[j], h.peer[j], h.send_tag[j], MPI_COMM_WORLD, &r[k + j]);
    MPI_Waitall(2 * k, r.data(), MPI_STATUSES_IGNORE);
  }
  sync(x);
  return (now() - t0) / iters;
}

double halo_mpix(Setup& x, Halo& h, int iters, int window, HostTime* ht) {
  const int k = static_cast<int>(h.peer.size());
  std::vector<MPI_Request> r(2 * k);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    touch(x, h.grid, i);
    ht->begin();
    for (int j = 0; j < k; ++j)
      MPIX_Irecv_enqueue(h.grid, 1, h.recv_t[j], h.peer[j], h.recv_tag[j], x.comm, &r[j]);
    for (int j = 0; j < k; ++j)
      MPIX_Isend_enqueue(h.grid, 1, h.send_t[j], h.peer[j], h.send_tag[j], x.comm, &r[k + j]);
    MPIX_Waitall_enqueue(2 * k, r.data(), MPI_STATUSES_IGNORE);
    ht->end();
    if ((i + 1) % window == 0) sync(x);
  }
  sync(x);
  return (now() - t0) / iters;
}

double halo_mpis(Setup& x, Halo& h, int iters, int window, HostTime* ht) {
  const int k = static_cast<int>(h.peer.size());
  std::vector<MPIS_Request> r(2 * k);
  for (int j = 0; j < k; ++j)
    MPIS_Recv_init(h.grid, 1, h.recv_t[j], h.peer[j], h.recv_tag[j], x.comm, MPI_INFO_NULL, &r[j]);
  for (int j = 0; j < k; ++j)
    MPIS_Send_init(h.grid, 1, h.send_t[j], h.peer[j], h.send_tag[j], x.comm, MPI_INFO_NULL,
                   &r[k + j]);
  MPIS_Matchall(2 * k, r.data(), MPI_STATUSES_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    touch(x, h.grid, i);
    ht->begin();
    MPIS_Enqueue_startall(x.q, 2 * k, r.data());
    MPIS_Enqueue_waitall(x.q);
    ht->end();
    if ((i + 1) % window == 0) sync(x);
  }
  MPIS_Queue_wait(x.q);
  const double t = (now() - t0) / iters;
  MPIS_Request_freeall(2 * k, r.data());
  return t;
}

void halo_table(Setup& x, bool quick, FILE* csv, const std::string& device) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (x.me == 0) {
    std::printf(
        "\nHalo exchange: %d ranks in a periodic 3D grid, 26 neighbours (subarray types), "
        "n^3 doubles a rank with a halo of 1; time an iteration (compute kernel + exchange) "
        "in microseconds, host actions an iteration in brackets; host: the application "
        "thread's time in the enqueue calls an iteration (rank 0)\n\n",
        size);
    std::printf(
        "| n | CPU-driven | MPIX enqueue | speed-up | MPIS | speed-up | MPIX host | MPIS host |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  const std::vector<int> ns = quick ? std::vector<int>{8} : std::vector<int>{16, 32, 64, 128};
  for (int n : ns) {
    cli::progress("loom-bench", "stream: halo, n = %d", n);
    Halo h = make_halo(n);
    const size_t bytes = sizeof(double) * static_cast<size_t>(n + 2) * (n + 2) * (n + 2);
    if (x.emulated) {
      h.grid = std::calloc(bytes, 1);
    } else {
#ifdef LOOM_HAVE_CUDA
      cudaMalloc(&h.grid, bytes);
      cudaMemset(h.grid, 0, bytes);
#endif
    }
    // Iterations the host enqueues before it synchronises once
    // (LOOM_BENCH_STREAM_WINDOW, default 8): 1 shows what running ahead gains.
    const char* w = std::getenv("LOOM_BENCH_STREAM_WINDOW");
    const int iters = quick ? 10 : 100, window = w && std::atoi(w) > 0 ? std::atoi(w) : 8;
    halo_cpu(x, h, 3);  // warm-ups
    HostTime eh, ph;
    halo_mpix(x, h, 3, window, &eh);
    halo_mpis(x, h, 3, window, &ph);
    eh = ph = HostTime{};
    const double c = slowest(halo_cpu(x, h, iters));
    long long a0 = actions();
    const double e = slowest(halo_mpix(x, h, iters, window, &eh));
    const double ea = static_cast<double>(actions() - a0) / iters;
    a0 = actions();
    const double p = slowest(halo_mpis(x, h, iters, window, &ph));
    const double pa = static_cast<double>(actions() - a0) / iters;
    const double eu = eh.sum / iters * 1e6, pu = ph.sum / iters * 1e6;
    if (x.me == 0)
      std::printf("| %d | %.1f | %.1f [%.0f] | %.2fx | %.1f [%.0f] | %.2fx | %.1f | %.1f |\n", n,
                  c * 1e6, e * 1e6, ea, c / e, p * 1e6, pa, c / p, eu, pu);
    if (csv)
      std::fprintf(csv, "halo,%d,%d,%.2f,%.2f,%.1f,%.2f,%.1f,%.2f,%.2f,%s\n", size, n, c * 1e6,
                   e * 1e6, ea, p * 1e6, pa, eu, pu, device.c_str());
    if (x.emulated) {
      std::free(h.grid);
    } else {
#ifdef LOOM_HAVE_CUDA
      cudaFree(h.grid);
#endif
    }
    free_halo(h);
  }
}

}  // namespace

int bench_stream(bool quick, const char* csv_path) {
  Setup x;
  int size = 0, provided = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &x.me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Query_thread(&provided);
  int gpus = 0;
#ifdef LOOM_HAVE_CUDA
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus > 0) cudaSetDevice(x.me % gpus);  // a GPU a rank where there are enough
#endif
  const char* test_mode = std::getenv("LOOM_TEST_HOST_AS_DEVICE");
  // The host test mode treats every buffer as device memory and moves it
  // with the host engine: GPU memory would crash it, GPU or not.
  x.emulated = test_mode && std::strcmp(test_mode, "1") == 0;
  if (size < 2 || provided < MPI_THREAD_MULTIPLE || (gpus == 0 && !x.emulated)) {
    if (x.me == 0)
      std::fprintf(stderr,
                   "stream needs 2 ranks or more, MPI_THREAD_MULTIPLE and a GPU (or "
                   "LOOM_TEST_HOST_AS_DEVICE=1 to check the benchmark on an emulated stream)\n");
    return 2;
  }
  x.peer = x.me ^ 1;
  const size_t most = quick ? (size_t{1} << 20) : (size_t{64} << 20);
  std::string device = "emulated stream, no GPU (a check, not a measurement)";
  if (x.emulated) {
    loom_host_stream_create(&x.s);
    x.src = std::malloc(most);
    x.dst = std::malloc(most);
    std::memset(x.src, 1, most);
    std::memset(x.dst, 2, most);
  } else {
#ifdef LOOM_HAVE_CUDA
    cudaStream_t cs;
    cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
    x.s = cs;
    cudaMalloc(&x.src, most);
    cudaMalloc(&x.dst, most);
    cudaMemset(x.src, 1, most);
    cudaMemset(x.dst, 2, most);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    device = prop.name;
#endif
  }
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "type", "cudaStream_t");
  MPIX_Info_set_hex(info, "value", &x.s, sizeof(x.s));
  int rc = MPIX_Stream_create(info, &x.stream);
  MPI_Info_free(&info);
  if (rc == MPI_SUCCESS) rc = MPIX_Stream_comm_create(MPI_COMM_WORLD, x.stream, &x.comm);
  if (rc == MPI_SUCCESS) rc = MPIS_Queue_init(&x.q, GPU_MEM_OPS, &x.s);
  if (rc != MPI_SUCCESS) {
    if (x.me == 0) std::fprintf(stderr, "stream: could not set up the stream (error %d)\n", rc);
    return 1;
  }
  std::string device_csv = device;  // a CSV field: no commas
  for (char& ch : device_csv)
    if (ch == ',') ch = ';';
  FILE* csv = nullptr;
  int csv_ok = 1;  // every rank stops if rank 0 cannot write it (none waits in a round alone)
  if (csv_path && x.me == 0 && !(csv = std::fopen(csv_path, "w"))) {
    std::fprintf(stderr, "loom-bench: cannot write %s\n", csv_path);
    csv_ok = 0;
  }
  MPI_Bcast(&csv_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!csv_ok) return 1;
  if (csv) {
    // size: bytes (pingpong) or n, a rank's n^3 cells (halo); times in us.
    std::fprintf(csv,
                 "table,ranks,size,cpu_driven_us,mpix_us,mpix_host_actions,mpis_us,"
                 "mpis_host_actions,mpix_enqueue_us,mpis_enqueue_us,device\n");
  }
  if (size == 2 && x.me == 0) {
    std::printf(
        "loom-bench stream: 2 ranks, %s; round trip (kernel + send + receive on both "
        "sides) in microseconds; host actions a round trip in brackets; host: the application "
        "thread's time in the enqueue calls a round trip (rank 0)\n\n",
        device.c_str());
    std::printf(
        "| bytes | CPU-driven | MPIX enqueue | ratio | MPIS | ratio | MPIX host | MPIS host |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  std::vector<size_t> sizes;  // the ping-pong: 2 ranks only
  for (size_t n = 8; size == 2 && n <= most; n *= (quick ? 64 : 8)) sizes.push_back(n);
  if (size == 2 && sizes.back() != most) sizes.push_back(most);
  for (size_t n : sizes) {
    const int iters = quick ? 20 : n <= (size_t{1} << 20) ? 200 : 20;
    const int window = n <= (size_t{1} << 20) ? 16 : 4;
    cli::progress("loom-bench", "stream: ping-pong, %zu bytes", n);
    cpu_driven(x, n, 5);  // warm-ups: pools, layouts, the model's cache
    HostTime eh, ph;
    mpix(x, n, 5, window, &eh);
    mpis(x, n, 5, window, &ph);
    eh = ph = HostTime{};
    const double c = slowest(cpu_driven(x, n, iters));
    long long a0 = actions();
    const double e = slowest(mpix(x, n, iters, window, &eh));
    const double ea = static_cast<double>(actions() - a0) / iters;
    a0 = actions();
    const double p = slowest(mpis(x, n, iters, window, &ph));
    const double pa = static_cast<double>(actions() - a0) / iters;
    const double eu = eh.sum / iters * 1e6, pu = ph.sum / iters * 1e6;
    if (x.me == 0)
      std::printf("| %s | %.1f | %.1f [%.0f] | %.2f | %.1f [%.0f] | %.2f | %.1f | %.1f |\n",
                  size_name(n).c_str(), c * 1e6, e * 1e6, ea, e / c, p * 1e6, pa, p / c, eu, pu);
    if (csv)
      std::fprintf(csv, "pingpong,2,%zu,%.2f,%.2f,%.1f,%.2f,%.1f,%.2f,%.2f,%s\n", n, c * 1e6,
                   e * 1e6, ea, p * 1e6, pa, eu, pu, device_csv.c_str());
  }
  if (x.me == 0 && size != 2) std::printf("loom-bench stream: %s\n", device.c_str());
  halo_table(x, quick, csv, device_csv);
  if (csv) std::fclose(csv);
  MPIS_Queue_free(&x.q);
  MPI_Comm_free(&x.comm);
  MPIX_Stream_free(&x.stream);
  if (x.emulated) {
    loom_host_stream_free(x.s);
    std::free(x.src);
    std::free(x.dst);
  } else {
#ifdef LOOM_HAVE_CUDA
    cudaFree(x.src);
    cudaFree(x.dst);
    cudaStreamDestroy(static_cast<cudaStream_t>(x.s));
#endif
  }
  return 0;
}

}  // namespace loom::tools
