#include "transport/channel.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/nccl_lib.hpp"

#if defined(LOOM_HAVE_NCCL)
#include <cuda_runtime_api.h>

#include "pack/cuda/check.hpp"
#endif

namespace loom::transport {
namespace {

// ---- MPI (host test mode) ----

class MpiChannel final : public Channel {
 public:
  explicit MpiChannel(MPI_Comm world) { PMPI_Comm_dup(world, &comm_); }
  ~MpiChannel() override { shutdown(); }
  const char* name() const override { return "the MPI (host test mode)"; }
  Status connect(MPI_Comm, const std::vector<int>&) override { return Status::ok(); }

  Result<uint64_t> start_send(int to, const void* src, size_t bytes) override {
    std::vector<MPI_Request> reqs;
    for (size_t off = 0; off == 0 || off < bytes; off += kPiece) {
      MPI_Request r;
      const int n = static_cast<int>(std::min(kPiece, bytes - off));
      if (PMPI_Isend(static_cast<const char*>(src) + off, n, MPI_BYTE, to, 0, comm_, &r) !=
          MPI_SUCCESS)
        return Status(Err::kMpi, "channel send");
      reqs.push_back(r);
    }
    std::lock_guard<std::mutex> lk(mu_);
    sends_.emplace(next_, std::move(reqs));
    return next_++;
  }
  Result<bool> done(uint64_t ticket) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = sends_.find(ticket);
    if (it == sends_.end()) return true;
    int flag = 0;
    PMPI_Testall(static_cast<int>(it->second.size()), it->second.data(), &flag,
                 MPI_STATUSES_IGNORE);
    if (flag) sends_.erase(it);
    return flag != 0;
  }
  Status recv(int from, void* dst, size_t bytes) override {
    for (size_t off = 0; off == 0 || off < bytes; off += kPiece) {
      const int n = static_cast<int>(std::min(kPiece, bytes - off));
      if (PMPI_Recv(static_cast<char*>(dst) + off, n, MPI_BYTE, from, 0, comm_,
                    MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return Status(Err::kMpi, "channel receive");
    }
    return Status::ok();
  }
  void shutdown() override {
    if (comm_ != MPI_COMM_NULL) PMPI_Comm_free(&comm_);
  }

 private:
  static constexpr size_t kPiece = size_t{1} << 30;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mu_;
  std::map<uint64_t, std::vector<MPI_Request>> sends_;
  uint64_t next_ = 1;
};

#if defined(LOOM_HAVE_NCCL)

// ---- NCCL ----

Status cuda_status(cudaError_t e, const char* what) {
  return e == cudaSuccess ? Status::ok() : pack::gpu::cuda_status(e, what, __FILE__, __LINE__);
}

class NcclChannel final : public Channel {
 public:
  explicit NcclChannel(int me) : me_(me) {}
  ~NcclChannel() override { shutdown(); }
  const char* name() const override { return "NCCL"; }

  Status connect(MPI_Comm world, const std::vector<int>& peers) override {
    int n = 0;
    PMPI_Comm_size(world, &n);
    Status s = cuda_status(cudaGetDevice(&device_), "cudaGetDevice");
    // The receiver of each ordered pair makes its id: mine[p] is for the
    // pair p -> me, theirs[p] (from p) for me -> p.
    std::vector<ncclUniqueId> mine(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
    std::memset(static_cast<void*>(mine.data()), 0, mine.size() * sizeof(ncclUniqueId));
    for (int p : peers)
      if (s)
        s = nccl_status(nccl_api().get_unique_id(&mine[static_cast<size_t>(p)]), "ncclGetUniqueId");
    // Every process takes part, whatever failed: the others wait for it.
    PMPI_Alltoall(mine.data(), sizeof(ncclUniqueId), MPI_BYTE, theirs.data(), sizeof(ncclUniqueId),
                  MPI_BYTE, world);
    if (!s) return s;
    // Every pair of this process in one group: NCCL joins them together, so
    // no order of joins makes two processes wait for each other.
    std::lock_guard<std::mutex> lk(mu_);
    LOOM_TRY(nccl_status(nccl_api().group_start(), "ncclGroupStart"));
    for (int p : peers)
      for (int receiver = 0; receiver < 2 && s; ++receiver) {
        Pair pr;
        // Non-blocking: an NCCL kernel waits for another process, and a
        // blocking stream would make this process's legacy-stream calls
        // wait for it too. The receiver orders itself after the legacy
        // stream explicitly (recv).
        s = cuda_status(cudaStreamCreateWithFlags(&pr.stream, cudaStreamNonBlocking), "stream");
        if (s)
          s = cuda_status(cudaEventCreateWithFlags(&pr.after, cudaEventDisableTiming), "event");
        const ncclUniqueId& id =
            receiver ? mine[static_cast<size_t>(p)] : theirs[static_cast<size_t>(p)];
        // The sender is rank 0 of the pair's communicator, the receiver rank 1.
        if (s)
          s = nccl_status(nccl_api().comm_init_rank(&pr.comm, 2, id, receiver), "ncclCommInitRank");
        (receiver ? in_ : out_)[p] = pr;
      }
    Status end = nccl_status(nccl_api().group_end(), "ncclGroupEnd");
    if (!s || !end) {
      failed_ = true;  // the pairs' state is unknown: never used, never destroyed
      return s ? end : s;
    }
    return warm_up(peers);
  }

  Result<uint64_t> start_send(int to, const void* src, size_t bytes) override {
    if (device_ >= 0) cudaSetDevice(device_);  // the sender's thread
    Pair p;
    LOOM_TRY(find(out_, to, &p));
    LOOM_TRY(nccl_status(nccl_api().send(src, bytes, ncclUint8, 1, p.comm, p.stream), "ncclSend"));
    cudaEvent_t ev = nullptr;
    LOOM_TRY(cuda_status(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event"));
    LOOM_TRY(cuda_status(cudaEventRecord(ev, p.stream), "event record"));
    std::lock_guard<std::mutex> lk(mu_);
    sends_.emplace(next_, ev);
    return next_++;
  }
  Result<bool> done(uint64_t ticket) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = sends_.find(ticket);
    if (it == sends_.end()) return true;
    const cudaError_t e = cudaEventQuery(it->second);
    if (e == cudaErrorNotReady) return false;
    cudaEventDestroy(it->second);
    sends_.erase(it);
    LOOM_TRY(cuda_status(e, "NCCL send"));
    return true;
  }
  Status recv(int from, void* dst, size_t bytes) override {
    Pair p;
    LOOM_TRY(find(in_, from, &p));
    // After what the application queued on the legacy default stream, as
    // Loom's own stream is (the buffer may still be in its hands there).
    LOOM_TRY(cuda_status(cudaEventRecord(p.after, cudaStreamLegacy), "event record"));
    LOOM_TRY(cuda_status(cudaStreamWaitEvent(p.stream, p.after, 0), "stream wait"));
    LOOM_TRY(nccl_status(nccl_api().recv(dst, bytes, ncclUint8, 0, p.comm, p.stream), "ncclRecv"));
    return cuda_status(cudaStreamSynchronize(p.stream), "NCCL receive");
  }
  void shutdown() override {
    std::lock_guard<std::mutex> lk(mu_);
    // ncclCommDestroy may wait for the pair's other end: every process
    // destroys its pairs in one global order, (sender, receiver), so no two
    // wait for each other.
    std::map<std::pair<int, int>, Pair> all;
    for (auto& [from, p] : in_) all[{from, me_}] = p;
    for (auto& [to, p] : out_) all[{me_, to}] = p;
    in_.clear();
    out_.clear();
    if (failed_) return;
    for (auto& [ends, p] : all) {
      if (p.stream) cudaStreamSynchronize(p.stream);
      if (p.comm) nccl_api().comm_destroy(p.comm);
      if (p.stream) cudaStreamDestroy(p.stream);
      if (p.after) cudaEventDestroy(p.after);
    }
    for (auto& [t, ev] : sends_) cudaEventDestroy(ev);
    sends_.clear();
  }

 private:
  struct Pair {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t after = nullptr;  // the receiver's: the legacy stream's work so far
  };
  // NCCL connects a pair on its first transfer, and the host call of that
  // first send waits until the peer posts its first receive: with the
  // sender's thread stuck there, four ranks of a halo hung (each waiting
  // for another's thread). One byte each way on every pair, all in one
  // group, connects them all now. Under mu_.
  Status warm_up(const std::vector<int>& peers) {
    if (peers.empty()) return Status::ok();
    void* bytes = nullptr;
    LOOM_TRY(cuda_status(cudaMalloc(&bytes, 2 * peers.size()), "cudaMalloc"));
    Status s = nccl_status(nccl_api().group_start(), "ncclGroupStart");
    for (size_t i = 0; i < peers.size() && s; ++i) {
      char* b = static_cast<char*>(bytes) + 2 * i;
      const Pair& out = out_[peers[i]];
      const Pair& in = in_[peers[i]];
      s = nccl_status(nccl_api().send(b, 1, ncclUint8, 1, out.comm, out.stream), "ncclSend");
      if (s)
        s = nccl_status(nccl_api().recv(b + 1, 1, ncclUint8, 0, in.comm, in.stream), "ncclRecv");
    }
    Status end = nccl_status(nccl_api().group_end(), "ncclGroupEnd");
    for (int p : peers) {
      cudaStreamSynchronize(out_[p].stream);
      cudaStreamSynchronize(in_[p].stream);
    }
    cudaFree(bytes);
    if (!s || !end) failed_ = true;
    return s ? end : s;
  }
  Status find(std::map<int, Pair>& pairs, int peer, Pair* out) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pairs.find(peer);
    if (failed_ || it == pairs.end() || !it->second.comm)
      return Status(Err::kInvalidArg, "no NCCL pair with that rank");
    *out = it->second;
    return Status::ok();
  }

  const int me_;     // this process's world rank
  int device_ = -1;  // the GPU the pairs live on
  bool failed_ = false;
  std::mutex mu_;
  std::map<int, Pair> in_, out_;  // by the peer's world rank: from it, to it
  std::map<uint64_t, cudaEvent_t> sends_;
  uint64_t next_ = 1;
};

#endif

}  // namespace

Result<std::unique_ptr<Channel>> make_nccl_channel(int world_rank) {
#if defined(LOOM_HAVE_NCCL)
  if (!nccl_api().why.empty()) return Status(Err::kUnsupported, nccl_api().why);
  return std::unique_ptr<Channel>(new NcclChannel(world_rank));
#else
  (void)world_rank;
  return Status(Err::kUnsupported, "Loom was built without NCCL headers");
#endif
}

std::unique_ptr<Channel> make_mpi_channel(MPI_Comm world) {
  return std::make_unique<MpiChannel>(world);
}

}  // namespace loom::transport
