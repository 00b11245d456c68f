#include "transport/channel.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "transport/nccl_lib.hpp"

#if defined(LOOM_HAVE_NCCL)
#include <cuda_runtime_api.h>
#endif

namespace loom::transport {
namespace {

// ---- MPI (host test mode) ----

class MpiChannel final : public Channel {
 public:
  explicit MpiChannel(MPI_Comm world) { PMPI_Comm_dup(world, &comm_); }
  ~MpiChannel() override { shutdown(); }
  const char* name() const override { return "the MPI (host test mode)"; }
  Result<bool> offer(int, Offer*) override { return false; }
  Status join_receiver(int, const Offer&) override { return Status::ok(); }
  Status join_sender(int, const Offer&) override { return Status::ok(); }

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

static_assert(sizeof(ncclUniqueId) <= sizeof(Channel::Offer::bytes));

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return Status(Err::kCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

class NcclChannel final : public Channel {
 public:
  explicit NcclChannel(int me) : me_(me) {}
  ~NcclChannel() override { shutdown(); }
  const char* name() const override { return "NCCL"; }
  void note_device() override {
    int d = -1;
    if (cudaGetDevice(&d) == cudaSuccess) device_.store(d, std::memory_order_relaxed);
  }

  Result<bool> offer(int from, Offer* offer) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (in_.count(from)) return false;
    }
    ncclUniqueId id;
    LOOM_TRY(nccl_status(nccl_api().get_unique_id(&id), "ncclGetUniqueId"));
    std::memcpy(offer->bytes, &id, sizeof id);
    return true;
  }
  // The receiver is rank 1 of the pair's communicator, the sender rank 0.
  // Neither holds mu_ while NCCL joins them: each end's other pairs go on.
  Status join_receiver(int from, const Offer& offer) override { return join(in_, from, offer, 1); }
  Status join_sender(int to, const Offer& offer) override { return join(out_, to, offer, 0); }

  Result<uint64_t> start_send(int to, const void* src, size_t bytes) override {
    use_device();
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
    // ncclCommDestroy waits for the pair's other end: every process
    // destroys its pairs in one global order, (sender, receiver), so no two
    // wait for each other.
    std::map<std::pair<int, int>, Pair> all;
    for (auto& [from, p] : in_) all[{from, me_}] = p;
    for (auto& [to, p] : out_) all[{me_, to}] = p;
    in_.clear();
    out_.clear();
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
  // The sender's thread works on the GPU its messages were lent on.
  void use_device() {
    const int d = device_.load(std::memory_order_relaxed);
    if (d >= 0) cudaSetDevice(d);
  }
  Status join(std::map<int, Pair>& pairs, int peer, const Offer& offer, int rank) {
    use_device();
    Pair p;
    // Non-blocking: an NCCL kernel waits for the other process, and a
    // blocking stream would make every legacy-stream call of this process
    // (NCCL's own, while it joins another pair) wait for it too, which can
    // close a cycle across processes. The receiver orders itself after the
    // legacy stream explicitly (recv).
    (void)rank;
    LOOM_TRY(cuda_status(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking), "stream"));
    Status s = cuda_status(cudaEventCreateWithFlags(&p.after, cudaEventDisableTiming), "event");
    ncclUniqueId id;
    std::memcpy(&id, offer.bytes, sizeof id);
    if (s) s = nccl_status(nccl_api().comm_init_rank(&p.comm, 2, id, rank), "ncclCommInitRank");
    if (!s) {
      if (p.after) cudaEventDestroy(p.after);
      cudaStreamDestroy(p.stream);
      return s;
    }
    std::lock_guard<std::mutex> lk(mu_);
    pairs[peer] = p;
    return Status::ok();
  }
  Status find(std::map<int, Pair>& pairs, int peer, Pair* out) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pairs.find(peer);
    if (it == pairs.end()) return Status(Err::kInvalidArg, "no NCCL pair with that rank");
    *out = it->second;
    return Status::ok();
  }

  const int me_;  // this process's world rank
  std::atomic<int> device_{-1};
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
