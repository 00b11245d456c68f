// loom-measure, terms of two ranks: the host MPI (through PMPI, so Loom
// stays out of the way), CUDA IPC copies, and Loom's own ping-pong for the
// fixed cost of each method.
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "loom/loom.h"
#include "measure.hpp"
#include "model/cost.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::tools::measure {
namespace {

constexpr int kTagData = 7001, kTagReady = 7002, kTagIpc = 7003, kTagLoom = 7004;

// Messages in one burst of the gap measurement: enough to see the stream's
// period, within 64 MiB of receive buffers (at least 2).
int burst(double bytes) {
  return static_cast<int>(std::clamp(64.0 * 1024 * 1024 / bytes, 2.0, 32.0));
}

// One-way time: half of rank 0's round trip.
template <class Send, class Recv>
double round_trip(const Ctx& c, Send&& send, Recv&& recv) {
  if (c.rank == 0) {
    const double t = now_us();
    send();
    recv();
    return (now_us() - t) / 2;
  }
  recv();
  send();
  return 0;
}

}  // namespace

void measure_host_mpi(const Ctx& c, model::Profile& p) {
  const std::vector<double>& sizes = c.grid.copy_sizes;
  size_t most = 0, most_burst = 0;
  for (double n : sizes) {
    most = std::max(most, static_cast<size_t>(n));
    most_burst = std::max(most_burst, static_cast<size_t>(n) * static_cast<size_t>(burst(n)));
  }
  std::vector<char> sbuf(most, 1);
  std::vector<char> rbuf(c.rank == 1 ? most_burst : most, 2);
  char* s = sbuf.data();
  char* r = rbuf.data();
  const int peer = c.peer;
  const MPI_Comm w = MPI_COMM_WORLD;
  const std::string pp_name = c.on_node ? model::term::kMpiOnNode : model::term::kMpiOffNode;

  model::Curve pingpong, overhead, gap;
  double t0 = now_us();
  for (double bytes : sizes) {
    const int n = static_cast<int>(bytes);
    Stats st = sample_pair(c, [&] {
      return round_trip(
          c, [&] { PMPI_Send(s, n, MPI_BYTE, peer, kTagData, w); },
          [&] { PMPI_Recv(r, n, MPI_BYTE, peer, kTagData, w, MPI_STATUS_IGNORE); });
    });
    append(pingpong, bytes, st);
  }
  progress(c, pp_name, "ping-pong / 2, " + range(sizes), t0);

  // The sender's time in MPI_Send with the receive already posted (rank 1
  // says so first), as an application's send to a waiting peer.
  t0 = now_us();
  for (double bytes : sizes) {
    const int n = static_cast<int>(bytes);
    Stats st = sample_pair(c, [&] {
      if (c.rank == 0) {
        PMPI_Recv(nullptr, 0, MPI_BYTE, peer, kTagReady, w, MPI_STATUS_IGNORE);
        const double t = now_us();
        PMPI_Send(s, n, MPI_BYTE, peer, kTagData, w);
        return now_us() - t;
      }
      MPI_Request req;
      PMPI_Irecv(r, n, MPI_BYTE, peer, kTagData, w, &req);
      PMPI_Send(nullptr, 0, MPI_BYTE, peer, kTagReady, w);
      PMPI_Wait(&req, MPI_STATUS_IGNORE);
      return 0.0;
    });
    append(overhead, bytes, st);
  }
  progress(c, model::term::kMpiOverhead, "MPI_Send, receive posted, " + range(sizes), t0);

  // A burst of Isends into pre-posted receives: time per message.
  t0 = now_us();
  for (double bytes : sizes) {
    const int n = static_cast<int>(bytes), k = burst(bytes);
    std::vector<MPI_Request> reqs(static_cast<size_t>(k));
    Stats st = sample_pair(c, [&] {
      if (c.rank == 0) {
        PMPI_Recv(nullptr, 0, MPI_BYTE, peer, kTagReady, w, MPI_STATUS_IGNORE);
        const double t = now_us();
        for (int i = 0; i < k; ++i) PMPI_Isend(s, n, MPI_BYTE, peer, kTagData, w, &reqs[i]);
        PMPI_Waitall(k, reqs.data(), MPI_STATUSES_IGNORE);
        return (now_us() - t) / k;
      }
      for (int i = 0; i < k; ++i)
        PMPI_Irecv(r + static_cast<size_t>(i) * n, n, MPI_BYTE, peer, kTagData, w, &reqs[i]);
      PMPI_Send(nullptr, 0, MPI_BYTE, peer, kTagReady, w);
      PMPI_Waitall(k, reqs.data(), MPI_STATUSES_IGNORE);
      return 0.0;
    });
    append(gap, bytes, st);
  }
  progress(c, model::term::kMpiGap, "Isend bursts of 2..32, " + range(sizes), t0);

  if (c.rank != 0) return;
  p.curves[pp_name] = pingpong;
  p.curves[model::term::kMpiOverhead] = overhead;
  p.curves[model::term::kMpiGap] = gap;
  p.loggop[pp_name] = model::fit_loggop(pingpong, overhead, gap);
}

void measure_ipc(const Ctx& c, model::Profile& p) {
  const std::vector<double>& sizes = c.grid.ipc_sizes;
  const size_t most = static_cast<size_t>(sizes.back());
  const double t0 = now_us();
  model::Curve curve;
  if (c.host_mode) {
    // No GPU: a host copy stands in for the peer's mapped memory.
    if (c.rank != 0) {
      wait_for_peer(c);
      return;
    }
    std::vector<char> src(most, 1), dst(most, 2);
    for (double bytes : sizes)
      append(curve, bytes, sample_local(c.reps, [&] {
               std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
             }));
    release_peer(c);
    p.curves[model::term::kIpcCopy] = curve;
    p.loggop["ipc"] = model::fit_loggop(curve, {}, {});
    progress(c, model::term::kIpcCopy, "memcpy (host mode), " + range(sizes), t0);
    return;
  }
#ifdef LOOM_HAVE_CUDA
  // Rank 0 lends a buffer; rank 1 maps it and times copies out of it into
  // its own memory, as the device method's receiver does.
  const MPI_Comm w = MPI_COMM_WORLD;
  std::vector<double> result;  // usec, spread per size; empty: IPC failed
  if (c.rank == 0) {
    void* src = nullptr;
    cudaIpcMemHandle_t h{};
    int ok = cudaMalloc(&src, most) == cudaSuccess && cudaMemset(src, 1, most) == cudaSuccess &&
             cudaDeviceSynchronize() == cudaSuccess && cudaIpcGetMemHandle(&h, src) == cudaSuccess;
    cudaGetLastError();
    PMPI_Send(&ok, 1, MPI_INT, 1, kTagIpc, w);
    if (ok) PMPI_Send(&h, sizeof h, MPI_BYTE, 1, kTagIpc, w);
    wait_for_peer(c);
    int n = 0;
    MPI_Status st;
    PMPI_Probe(1, kTagIpc, w, &st);
    PMPI_Get_count(&st, MPI_DOUBLE, &n);
    result.resize(static_cast<size_t>(n));
    PMPI_Recv(result.data(), n, MPI_DOUBLE, 1, kTagIpc, w, MPI_STATUS_IGNORE);
    if (src) cudaFree(src);
  } else {
    int ok = 0;
    PMPI_Recv(&ok, 1, MPI_INT, 0, kTagIpc, w, MPI_STATUS_IGNORE);
    cudaIpcMemHandle_t h{};
    void* peer_mem = nullptr;
    void* dst = nullptr;
    cudaStream_t stream = nullptr;
    if (ok) {
      PMPI_Recv(&h, sizeof h, MPI_BYTE, 0, kTagIpc, w, MPI_STATUS_IGNORE);
      ok = cudaIpcOpenMemHandle(&peer_mem, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess &&
           cudaMalloc(&dst, most) == cudaSuccess &&
           cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
    }
    for (double bytes : sizes) {
      if (!ok) break;
      Stats s = sample_local(c.reps, [&] {
        if (cudaMemcpyAsync(dst, peer_mem, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                            stream) != cudaSuccess ||
            cudaStreamSynchronize(stream) != cudaSuccess)
          ok = 0;
      });
      result.push_back(s.usec);
      result.push_back(s.spread);
    }
    if (!ok) result.clear();
    cudaGetLastError();
    if (stream) cudaStreamDestroy(stream);
    if (dst) cudaFree(dst);
    if (peer_mem) cudaIpcCloseMemHandle(peer_mem);  // before rank 0 frees it
    release_peer(c);
    PMPI_Send(result.data(), static_cast<int>(result.size()), MPI_DOUBLE, 0, kTagIpc, w);
    return;
  }
  if (result.size() != 2 * sizes.size()) {
    std::fprintf(stderr,
                 "loom-measure: ipc_copy: CUDA IPC between the two ranks failed; skipped\n");
    return;
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    append(curve, sizes[i], Stats{result[2 * i], result[2 * i + 1], 0});
  p.curves[model::term::kIpcCopy] = curve;
  p.loggop["ipc"] = model::fit_loggop(curve, {}, {});
  progress(c, model::term::kIpcCopy, "peer GPU memory -> own, " + range(sizes), t0);
#endif
}

void measure_loom_overheads(const Ctx& c, model::Profile& p) {
  if (!c.loom_device) {
    if (c.rank == 0)
      std::fprintf(stderr,
                   "loom-measure: overhead_*: skipped: Loom sees no device buffers here (no GPU; "
                   "LOOM_TEST_HOST_AS_DEVICE=1 tests without one)\n");
    return;
  }
  // The small sizes fit each method's fixed cost; one large size fits how
  // much of its summed terms the real path takes (its scale).
  std::vector<double> sizes = c.grid.loom_sizes;
  const double large = 16 * sizes.back();
  sizes.push_back(large);
  const size_t most = 2 * static_cast<size_t>(large);  // room for the packed case
  void* buf = nullptr;
  if (c.host_mode) {
    buf = std::calloc(most, 1);
  } else {
#ifdef LOOM_HAVE_CUDA
    if (cudaMalloc(&buf, most) != cudaSuccess || cudaMemset(buf, 1, most) != cudaSuccess)
      buf = nullptr;
#endif
  }
  int have = buf ? 1 : 0, all = 0;
  PMPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (c.rank == 0) std::fprintf(stderr, "loom-measure: overhead_*: no buffer; skipped\n");
    return;
  }

  const struct {
    const char* loom_name;
    model::Method method;
    const char* scalar;
    const char* packed_scalar;
    const char* scale;
    const char* packed_scale;
  } methods[] = {{"device", model::Method::kDevice, model::term::kOverheadDevice,
                  model::term::kOverheadDevicePacked, model::term::kScaleDevice,
                  model::term::kScaleDevicePacked},
                 {"oneshot", model::Method::kOneShot, model::term::kOverheadOneshot,
                  model::term::kOverheadOneshotPacked, nullptr, nullptr},
                 {"staged", model::Method::kStaged, model::term::kOverheadStaged,
                  model::term::kOverheadStagedPacked, nullptr, nullptr}};
  // Only the device method takes a scale: its terms are kernels and copies
  // whose time alone overstates their time in the path. One-shot's and
  // staged's terms carry large fixed costs (synchronised copies, the MPI),
  // which a scale fitted at 16 MiB would stretch at small sizes, where the
  // methods' choice is made (2 H100s: a staged scale of 1.5 made auto pick
  // staged at 1 KiB, 1.45x the device method's time).
  // A contiguous buffer, and a 2D layout of 8-byte blocks (every other one):
  // Loom's fixed cost differs between messages it copies and ones it packs.
  const int peer = c.peer;
  for (const auto& m : methods) {
    // Both ranks must take the method; either may lack it.
    int ok = loom_set_method(m.loom_name) == MPI_SUCCESS ? 1 : 0, both = 0;
    PMPI_Allreduce(&ok, &both, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!both) {
      if (c.rank == 0)
        std::fprintf(stderr,
                     "loom-measure: %-16s skipped: Loom's %s method is off (it needs LOOM_METHOD "
                     "unset, auto or %s on every rank at MPI_Init%s)\n",
                     m.scalar, m.loom_name, m.loom_name,
                     c.host_mode ? "; in the host test mode LOOM_METHOD=device" : "");
      continue;
    }
    for (int packed = 0; packed < 2; ++packed) {
      const double t0 = now_us();
      const char* scalar = packed ? m.packed_scalar : m.scalar;
      const char* scale = packed ? m.packed_scale : m.scale;
      std::vector<double> measured;
      // Without a scale to fit, the large size is not measured.
      const size_t points = scale ? sizes.size() : sizes.size() - 1;
      for (size_t at = 0; at < points; ++at) {
        const double bytes = sizes[at];
        const int n = static_cast<int>(bytes);
        MPI_Datatype t = MPI_BYTE;
        int count = n;
        if (packed) {
          MPI_Type_vector(n / 8, 8, 16, MPI_BYTE, &t);
          MPI_Type_commit(&t);
          count = 1;
        }
        Stats st = sample_pair(c, [&] {
          return round_trip(
              c, [&] { MPI_Send(buf, count, t, peer, kTagLoom, MPI_COMM_WORLD); },
              [&] { MPI_Recv(buf, count, t, peer, kTagLoom, MPI_COMM_WORLD, MPI_STATUS_IGNORE); });
        });
        if (packed) MPI_Type_free(&t);
        measured.push_back(st.usec);
      }
      if (c.rank != 0) continue;
      // What the model says without the method's fixed cost and scale: the
      // summed terms, which measured = overhead + scale * terms fits.
      model::Profile zero = p;
      for (const char* name : {m.scalar, m.packed_scalar}) zero.scalars[name] = 0;
      if (scale)
        for (const char* name : {m.scale, m.packed_scale}) zero.scalars[name] = 1;
      const model::Model model(zero);
      std::vector<double> terms;
      std::string shown;
      for (size_t i = 0; i < points; ++i) {
        const model::Shape shape{sizes[i], packed ? 8.0 : sizes[i], !packed, true, true};
        terms.push_back(model.predict(shape).usec[static_cast<int>(m.method)]);
        char b[96];
        std::snprintf(b, sizeof b, "%s%s %.1f/%.1f", i ? ", " : "", size_str(sizes[i]).c_str(),
                      measured[i], terms.back());
        shown += b;
      }
      double over = 0, k = 1;
      if (!model::fit_overhead_scale(measured, terms, scale != nullptr, &over, &k)) {
        std::fprintf(stderr, "loom-measure: %-16s skipped: the model lacks terms for %s\n", scalar,
                     m.loom_name);
        continue;
      }
      // The overhead may be negative: each term was timed alone with its own
      // launch and synchronisation, which the real path partly overlaps.
      p.scalars[scalar] = over;
      if (scale) p.scalars[scale] = k;
      char b[96];
      std::snprintf(b, sizeof b, " = %.2f us + %.2f x terms", over, k);
      progress(c, scalar, "Loom ping-pong/model us: " + shown + b, t0);
    }
  }
  loom_set_method("auto");
  if (c.host_mode) {
    std::free(buf);
    return;
  }
#ifdef LOOM_HAVE_CUDA
  cudaFree(buf);
#endif
}

}  // namespace loom::tools::measure
