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
#include "bench_stream.hpp"

#include <mpi.h>

#include <cstdio>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <vector>

#include "bench_stream_kernel.hpp"
#include "loom/stream.h"

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
  cudaStream_t s = nullptr;
  MPIX_Stream stream = MPIX_STREAM_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  MPIS_Queue q = MPIS_QUEUE_NULL;
  void *src = nullptr, *dst = nullptr;
};

// Round trips of `iters` iterations, the host enqueueing up to `window` of
// them before it waits for the stream (the staging of enqueued sends lives
// until they are done).
double cpu_driven(Setup& x, size_t n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    if (x.me == 0) {
      launch_touch(x.src, i, x.s);
      cudaStreamSynchronize(x.s);
      MPI_Send(x.src, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD);
      MPI_Recv(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      launch_touch(x.dst, i, x.s);
      cudaStreamSynchronize(x.s);
      MPI_Send(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, MPI_COMM_WORLD);
    }
  }
  cudaStreamSynchronize(x.s);
  return (now() - t0) / iters;
}

double mpix(Setup& x, size_t n, int iters, int window) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) {
    if (x.me == 0) {
      launch_touch(x.src, i, x.s);
      MPIX_Send_enqueue(x.src, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm);
      MPIX_Recv_enqueue(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm, MPI_STATUS_IGNORE);
    } else {
      MPIX_Recv_enqueue(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm, MPI_STATUS_IGNORE);
      launch_touch(x.dst, i, x.s);
      MPIX_Send_enqueue(x.dst, static_cast<int>(n), MPI_BYTE, x.peer, 0, x.comm);
    }
    if ((i + 1) % window == 0) cudaStreamSynchronize(x.s);
  }
  cudaStreamSynchronize(x.s);
  return (now() - t0) / iters;
}

double mpis(Setup& x, size_t n, int iters, int window) {
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
      launch_touch(x.src, i, x.s);
      MPIS_Enqueue_start(x.q, &send);
      MPIS_Enqueue_waitall(x.q);
      MPIS_Enqueue_start(x.q, &recv);
      MPIS_Enqueue_waitall(x.q);
    } else {
      MPIS_Enqueue_start(x.q, &recv);
      MPIS_Enqueue_waitall(x.q);
      launch_touch(x.dst, i, x.s);
      MPIS_Enqueue_start(x.q, &send);
      MPIS_Enqueue_waitall(x.q);
    }
    if ((i + 1) % window == 0) cudaStreamSynchronize(x.s);
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

}  // namespace

int bench_stream(bool quick) {
  Setup x;
  int size = 0, provided = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &x.me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Query_thread(&provided);
  int gpus = 0;
  if (size != 2 || provided < MPI_THREAD_MULTIPLE || cudaGetDeviceCount(&gpus) != cudaSuccess ||
      gpus == 0) {
    if (x.me == 0) std::fprintf(stderr, "stream needs 2 ranks, MPI_THREAD_MULTIPLE and a GPU\n");
    return 2;
  }
  x.peer = 1 - x.me;
  cudaStreamCreateWithFlags(&x.s, cudaStreamNonBlocking);
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "type", "cudaStream_t");
  MPIX_Info_set_hex(info, "value", &x.s, sizeof(x.s));
  MPIX_Stream_create(info, &x.stream);
  MPI_Info_free(&info);
  MPIX_Stream_comm_create(MPI_COMM_WORLD, x.stream, &x.comm);
  MPIS_Queue_init(&x.q, GPU_MEM_OPS, &x.s);
  const size_t most = quick ? (size_t{1} << 20) : (size_t{64} << 20);
  cudaMalloc(&x.src, most);
  cudaMalloc(&x.dst, most);
  cudaMemset(x.src, 1, most);
  cudaMemset(x.dst, 2, most);
  if (x.me == 0) {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    std::printf(
        "loom-bench stream: 2 ranks, %s; round trip (kernel + send + receive on both "
        "sides) in microseconds; host actions a round trip in brackets\n\n",
        prop.name);
    std::printf("| bytes | CPU-driven | MPIX enqueue | ratio | MPIS | ratio |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  std::vector<size_t> sizes;
  for (size_t n = 8; n <= most; n *= (quick ? 64 : 8)) sizes.push_back(n);
  if (sizes.back() != most) sizes.push_back(most);
  for (size_t n : sizes) {
    const int iters = quick ? 20 : n <= (size_t{1} << 20) ? 200 : 20;
    const int window = n <= (size_t{1} << 20) ? 16 : 4;
    cpu_driven(x, n, 5);  // warm-ups: pools, layouts, the model's cache
    mpix(x, n, 5, window);
    mpis(x, n, 5, window);
    const double c = slowest(cpu_driven(x, n, iters));
    long long a0 = actions();
    const double e = slowest(mpix(x, n, iters, window));
    const double ea = static_cast<double>(actions() - a0) / iters;
    a0 = actions();
    const double p = slowest(mpis(x, n, iters, window));
    const double pa = static_cast<double>(actions() - a0) / iters;
    if (x.me == 0)
      std::printf("| %s | %.1f | %.1f [%.0f] | %.2f | %.1f [%.0f] | %.2f |\n", size_name(n).c_str(),
                  c * 1e6, e * 1e6, ea, e / c, p * 1e6, pa, p / c);
  }
  MPIS_Queue_free(&x.q);
  MPI_Comm_free(&x.comm);
  MPIX_Stream_free(&x.stream);
  cudaFree(x.src);
  cudaFree(x.dst);
  cudaStreamDestroy(x.s);
  return 0;
}

}  // namespace loom::tools

#else

namespace loom::tools {
int bench_stream(bool) {
  std::fprintf(stderr, "stream needs a CUDA build of Loom\n");
  return 2;
}
}  // namespace loom::tools

#endif
