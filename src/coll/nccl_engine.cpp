#include "coll/nccl_engine.hpp"

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <vector>

#include "transport/nccl_lib.hpp"
#include "util/log.hpp"

#if defined(LOOM_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <unistd.h>
#endif

namespace loom::coll::nccl {

namespace {
std::atomic<uint64_t> g_calls{0};
}  // namespace

uint64_t calls() {
  return g_calls.load(std::memory_order_relaxed);
}

#if defined(LOOM_HAVE_NCCL)
namespace {

using transport::nccl_status;
const transport::NcclApi& api() {
  return transport::nccl_api();
}

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return Status(Err::kCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

// What one MPI communicator holds (its attribute).
struct State {
  bool usable = false;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t after = nullptr;  // the legacy stream's point at a call (see order())
  int rank = 0, size = 0;
  void destroy() {
    if (comm) {
      if (stream) cudaStreamSynchronize(stream);
      api().comm_destroy(comm);
      comm = nullptr;
    }
    if (stream) {
      cudaStreamDestroy(stream);
      stream = nullptr;
    }
    if (after) {
      cudaEventDestroy(after);
      after = nullptr;
    }
  }
};

std::mutex g_mu;
std::set<State*> g_open;  // states with an NCCL communicator (destroyed at finalize)
int g_keyval = MPI_KEYVAL_INVALID;

int delete_state(MPI_Comm, int, void* attr, void*) {
  auto* s = static_cast<State*>(attr);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_open.erase(s);
  }
  s->destroy();
  delete s;
  return MPI_SUCCESS;
}

int keyval() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_keyval == MPI_KEYVAL_INVALID)
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &g_keyval, nullptr);
  return g_keyval;
}

// Who this rank is, for the verdict: its node and its GPU.
struct Seat {
  int has = 0;            // NCCL loaded and a GPU current
  uint64_t host = 0;      // hash of the host name
  unsigned char gpu[16];  // the GPU's UUID
};

Seat my_seat() {
  Seat s{};
  std::memset(s.gpu, 0, sizeof s.gpu);
  int dev = -1, n = 0;
  if (!api().why.empty() || cudaGetDeviceCount(&n) != cudaSuccess || n == 0 ||
      cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return s;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    cudaGetLastError();
    return s;
  }
  std::memcpy(s.gpu, &p.uuid, sizeof s.gpu);
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  s.host = std::hash<std::string>{}(name);
  s.has = 1;
  return s;
}

State* state_of(MPI_Comm comm, transport::WaitFn wait) {
  const int kv = keyval();
  void* attr = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, kv, &attr, &found);
  if (found) return static_cast<State*>(attr);
  // First use on comm: every rank is here (the callers' gates are alike).
  auto* s = new State();
  PMPI_Comm_rank(comm, &s->rank);
  PMPI_Comm_size(comm, &s->size);
  const Seat me = my_seat();
  std::vector<Seat> all(static_cast<size_t>(s->size));
  transport::call_or_wait(
      wait,
      [&] {
        return PMPI_Allgather(&me, sizeof(Seat), MPI_BYTE, all.data(), sizeof(Seat), MPI_BYTE,
                              comm);
      },
      [&](MPI_Request* r) {
        return PMPI_Iallgather(&me, sizeof(Seat), MPI_BYTE, all.data(), sizeof(Seat), MPI_BYTE,
                               comm, r);
      });
  bool ok = true;
  for (size_t i = 0; i < all.size() && ok; ++i) {
    ok = all[i].has != 0;
    for (size_t j = 0; j < i && ok; ++j)
      ok = !(all[i].host == all[j].host && std::memcmp(all[i].gpu, all[j].gpu, 16) == 0);
  }
  s->usable = ok;
  if (!ok && s->rank == 0)
    LOOM_INFO(kMpi, "NCCL engine off on a communicator of %d ranks: %s", s->size,
              !api().why.empty() ? api().why.c_str()
                                 : "some ranks share a GPU, or have none (the node engine serves)");
  PMPI_Comm_set_attr(comm, kv, s);
  return s;
}

// The NCCL communicator of s, made on first use (collective over comm).
Status ready(MPI_Comm comm, State* s) {
  if (s->comm) return Status::ok();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  int ok = 1;
  if (s->rank == 0) ok = api().get_unique_id(&id) == ncclSuccess;
  PMPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (!ok) return Status(Err::kCuda, "ncclGetUniqueId failed");
  PMPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
  // A non-blocking stream: NCCL's kernel waits for the peers, and a blocking
  // stream would hold this rank's later legacy-stream work (a cudaMemcpy)
  // behind it, which a peer's call may be waiting for. order() puts each
  // call after the legacy stream's earlier work instead.
  LOOM_TRY(
      cuda_status(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "NCCL stream"));
  LOOM_TRY(cuda_status(cudaEventCreateWithFlags(&s->after, cudaEventDisableTiming), "NCCL event"));
  LOOM_TRY(nccl_status(api().comm_init_rank(&s->comm, s->size, id, s->rank), "ncclCommInitRank"));
  std::lock_guard<std::mutex> lk(g_mu);
  g_open.insert(s);
  LOOM_INFO(kMpi, "NCCL communicator of %d ranks made", s->size);
  return Status::ok();
}

bool dtype_of(MPI_Datatype t, ncclDataType_t* out) {
  if (t == MPI_CHAR || t == MPI_SIGNED_CHAR || t == MPI_INT8_T)
    *out = ncclInt8;
  else if (t == MPI_UNSIGNED_CHAR || t == MPI_UINT8_T)
    *out = ncclUint8;
  else if (t == MPI_INT || t == MPI_INT32_T)
    *out = ncclInt32;
  else if (t == MPI_UNSIGNED || t == MPI_UINT32_T)
    *out = ncclUint32;
  else if (t == MPI_LONG || t == MPI_LONG_LONG || t == MPI_INT64_T)
    *out = sizeof(long) == 8 || t != MPI_LONG ? ncclInt64 : ncclInt32;
  else if (t == MPI_UNSIGNED_LONG || t == MPI_UNSIGNED_LONG_LONG || t == MPI_UINT64_T)
    *out = ncclUint64;
  else if (t == MPI_FLOAT)
    *out = ncclFloat32;
  else if (t == MPI_DOUBLE)
    *out = ncclFloat64;
  else
    return false;
  return true;
}

bool op_of(MPI_Op op, ncclRedOp_t* out) {
  if (op == MPI_SUM)
    *out = ncclSum;
  else if (op == MPI_PROD)
    *out = ncclProd;
  else if (op == MPI_MIN)
    *out = ncclMin;
  else if (op == MPI_MAX)
    *out = ncclMax;
  else
    return false;
  return true;
}

// NCCL's work starts after what the legacy default stream holds (a kernel
// that filled a buffer, a pageable cudaMemcpy's DMA), and, as the legacy
// stream waits for every blocking stream, after Loom's own movers' work.
Status order(const State& s) {
  LOOM_TRY(cuda_status(cudaEventRecord(s.after, cudaStreamLegacy), "NCCL ordering event"));
  return cuda_status(cudaStreamWaitEvent(s.stream, s.after, 0), "NCCL ordering wait");
}

// Runs `issue` on comm's NCCL communicator and stream, then waits for it
// (or, with `later`, records an event after it there).
template <class Issue>
Status run(MPI_Comm comm, Issue issue, Pending* later = nullptr) {
  State* s = state_of(comm, nullptr);  // made by usable() before
  if (!s->usable) return Status(Err::kUnsupported, "NCCL is not usable on this communicator");
  LOOM_TRY(ready(comm, s));
  std::shared_ptr<void> event;
  if (later) {  // made before the work is queued: a failure leaves nothing running
    cudaEvent_t e = nullptr;
    LOOM_TRY(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "NCCL event"));
    event.reset(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  }
  LOOM_TRY(order(*s));
  LOOM_TRY(issue(*s));
  g_calls.fetch_add(1, std::memory_order_relaxed);
  if (!later) return cuda_status(cudaStreamSynchronize(s->stream), "NCCL collective");
  Status rec =
      cuda_status(cudaEventRecord(static_cast<cudaEvent_t>(event.get()), s->stream), "NCCL event");
  if (!rec.is_ok()) {  // the work is queued: its buffers must outlive it
    cudaStreamSynchronize(s->stream);
    return rec;
  }
  *later = Pending(std::move(event));
  return Status::ok();
}

}  // namespace

bool Pending::finished(Status* err) const {
  if (!event_) return true;
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event_.get()));
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess && err) *err = cuda_status(e, "NCCL collective");
  return true;
}

bool available(std::string* why) {
  if (why) *why = api().why;
  return api().why.empty();
}

bool usable(MPI_Comm comm, transport::WaitFn wait) {
  return state_of(comm, wait)->usable;
}

Status prepare(MPI_Comm comm) {
  State* s = state_of(comm, nullptr);
  if (!s->usable) return Status(Err::kUnsupported, "NCCL is not usable on this communicator");
  return ready(comm, s);
}

bool reducible(MPI_Datatype t, MPI_Op op) {
  ncclDataType_t d;
  ncclRedOp_t o;
  return dtype_of(t, &d) && op_of(op, &o);
}

Status allreduce(MPI_Comm comm, const void* in, void* out, size_t count, MPI_Datatype t, MPI_Op op,
                 Pending* later) {
  ncclDataType_t d;
  ncclRedOp_t o;
  if (!dtype_of(t, &d) || !op_of(op, &o)) return Status(Err::kUnsupported, "no NCCL reduction");
  return run(
      comm,
      [&](State& s) {
        return nccl_status(api().all_reduce(in, out, count, d, o, s.comm, s.stream),
                           "ncclAllReduce");
      },
      later);
}

Status reduce(MPI_Comm comm, const void* in, void* out, size_t count, MPI_Datatype t, MPI_Op op,
              int root, Pending* later) {
  ncclDataType_t d;
  ncclRedOp_t o;
  if (!dtype_of(t, &d) || !op_of(op, &o)) return Status(Err::kUnsupported, "no NCCL reduction");
  return run(
      comm,
      [&](State& s) {
        return nccl_status(api().reduce(in, out, count, d, o, root, s.comm, s.stream),
                           "ncclReduce");
      },
      later);
}

Status reduce_scatter_block(MPI_Comm comm, const void* in, void* out, size_t count_each,
                            MPI_Datatype t, MPI_Op op) {
  ncclDataType_t d;
  ncclRedOp_t o;
  if (!dtype_of(t, &d) || !op_of(op, &o)) return Status(Err::kUnsupported, "no NCCL reduction");
  return run(comm, [&](State& s) {
    return nccl_status(api().reduce_scatter(in, out, count_each, d, o, s.comm, s.stream),
                       "ncclReduceScatter");
  });
}

Status bcast(MPI_Comm comm, void* buf, size_t bytes, int root, Pending* later) {
  return run(
      comm,
      [&](State& s) {
        return nccl_status(api().broadcast(buf, buf, bytes, ncclUint8, root, s.comm, s.stream),
                           "ncclBroadcast");
      },
      later);
}

Status allgather(MPI_Comm comm, const void* in, void* out, size_t bytes_each, Pending* later) {
  return run(
      comm,
      [&](State& s) {
        return nccl_status(api().all_gather(in, out, bytes_each, ncclUint8, s.comm, s.stream),
                           "ncclAllGather");
      },
      later);
}

Status exchange(MPI_Comm comm, const std::vector<Xfer>& sends, const std::vector<Xfer>& recvs,
                Pending* later) {
  return run(
      comm,
      [&](State& s) {
        LOOM_TRY(nccl_status(api().group_start(), "ncclGroupStart"));
        Status st = Status::ok();
        for (size_t i = 0; i < sends.size() && st.is_ok(); ++i)
          st = nccl_status(
              api().send(sends[i].buf, sends[i].bytes, ncclUint8, sends[i].peer, s.comm, s.stream),
              "ncclSend");
        for (size_t i = 0; i < recvs.size() && st.is_ok(); ++i)
          st = nccl_status(api().recv(const_cast<void*>(recvs[i].buf), recvs[i].bytes, ncclUint8,
                                      recvs[i].peer, s.comm, s.stream),
                           "ncclRecv");
        Status end = nccl_status(api().group_end(), "ncclGroupEnd");
        return st.is_ok() ? end : st;
      },
      later);
}

void shutdown() {
  std::set<State*> open;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    open.swap(g_open);
  }
  for (State* s : open) s->destroy();
}

#else  // no NCCL headers at build time: the engine is never there

bool available(std::string* why) {
  if (why) *why = "Loom was built without NCCL headers";
  return false;
}
bool usable(MPI_Comm, transport::WaitFn) {
  return false;
}
Status prepare(MPI_Comm) {
  return Status(Err::kUnsupported, "Loom was built without NCCL");
}
bool reducible(MPI_Datatype, MPI_Op) {
  return false;
}
namespace {
Status none() {
  return Status(Err::kUnsupported, "Loom was built without NCCL");
}
}  // namespace
bool Pending::finished(Status*) const {
  return true;
}
Status allreduce(MPI_Comm, const void*, void*, size_t, MPI_Datatype, MPI_Op, Pending*) {
  return none();
}
Status reduce(MPI_Comm, const void*, void*, size_t, MPI_Datatype, MPI_Op, int, Pending*) {
  return none();
}
Status reduce_scatter_block(MPI_Comm, const void*, void*, size_t, MPI_Datatype, MPI_Op) {
  return none();
}
Status bcast(MPI_Comm, void*, size_t, int, Pending*) {
  return none();
}
Status allgather(MPI_Comm, const void*, void*, size_t, Pending*) {
  return none();
}
Status exchange(MPI_Comm, const std::vector<Xfer>&, const std::vector<Xfer>&, Pending*) {
  return none();
}
void shutdown() {}

#endif

}  // namespace loom::coll::nccl
