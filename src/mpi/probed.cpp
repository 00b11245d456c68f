#include "mpi/probed.hpp"

#include <type_traits>

#include "mpi/device_message.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "util/log.hpp"

namespace loom::mpi {
namespace {

bool matches(const Probed& p, int source, int tag) {
  return (source == MPI_ANY_SOURCE || source == p.source) && (tag == MPI_ANY_TAG || tag == p.tag);
}

// MPI_Message is a pointer in Open MPI and an int in MPICH. Loom's handles
// never reach the MPI; they only must not equal one it made: the address
// of the kept message, or an int whose handle-kind bits MPICH never sets.
template <class H>
H make_handle(const Probed* p, uint32_t id) {
  if constexpr (std::is_pointer_v<H>) {
    (void)id;
    return reinterpret_cast<H>(const_cast<Probed*>(p));
  } else {
    (void)p;
    return static_cast<H>(0x0c000000u | (id & 0x00ffffffu));
  }
}

template <class H>
uint64_t handle_key(H h) {
  if constexpr (std::is_pointer_v<H>)
    return reinterpret_cast<uintptr_t>(h);
  else
    return static_cast<uint64_t>(static_cast<uint32_t>(h));
}

}  // namespace

bool ProbedMessages::maybe_header(MPI_Comm comm, const MPI_Status& st) {
  if (st.MPI_SOURCE < 0) return false;  // MPI_PROC_NULL
  MPI_Count n = 0;
  MPI_Get_elements_x(&st, MPI_BYTE, &n);
  return n >= 0 && rv_.may_be_header(static_cast<size_t>(n)) &&
         rv_.peer_on_node(comm, st.MPI_SOURCE) >= 0;
}

Result<Probed> ProbedMessages::receive(MPI_Comm comm, MPI_Message* msg, const MPI_Status& st) {
  MPI_Count n = 0;
  MPI_Get_elements_x(&st, MPI_BYTE, &n);
  Probed p;
  p.comm = comm;
  p.source = st.MPI_SOURCE;
  p.tag = st.MPI_TAG;
  p.bytes.resize(static_cast<size_t>(n > 0 ? n : 0));
  ByteArg a;
  if (a.make(p.bytes.size()) != MPI_SUCCESS) return Status(Err::kMpi, "byte type");
  const int rc = LOOM_NEXT(MPI_Mrecv)(p.bytes.data(), a.count, a.type, msg, MPI_STATUS_IGNORE);
  a.release();
  if (rc != MPI_SUCCESS) return Status(Err::kMpi, "receiving a probed message");
  p.header = rv_.is_header(p.bytes.data(), p.bytes.size(), &p.h);
  return p;
}

bool ProbedMessages::find(MPI_Comm comm, int source, int tag, bool remove, Probed* out) {
  if (empty()) return false;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = kept_.find(comm);
  if (it == kept_.end()) return false;
  auto& q = it->second;
  for (auto m = q.begin(); m != q.end(); ++m) {
    if (!matches(*m, source, tag)) continue;
    if (!remove) {
      *out = *m;
      return true;
    }
    *out = std::move(*m);
    q.erase(m);
    if (q.empty()) kept_.erase(it);
    n_.fetch_sub(1, std::memory_order_release);
    return true;
  }
  return false;
}

int ProbedMessages::take(MPI_Comm comm, MPI_Status& st) {
  if (!maybe_header(comm, st)) return MPI_SUCCESS;
  const int source = st.MPI_SOURCE, tag = st.MPI_TAG;
  // The probed message is the oldest of `source` with `tag`: take the
  // source's messages in order until it is reached.
  std::lock_guard<std::mutex> lk(mu_);
  for (;;) {
    MPI_Message msg;
    MPI_Status got;
    int rc = LOOM_NEXT(MPI_Mprobe)(source, MPI_ANY_TAG, comm, &msg, &got);
    if (rc != MPI_SUCCESS) return rc;
    auto p = receive(comm, &msg, got);
    if (!p) {
      LOOM_LOG(kError, kMpi, "probe: %s", p.status().message().c_str());
      return MPI_ERR_OTHER;
    }
    const bool last = got.MPI_TAG == tag;
    if (last) probed_status(p.value(), st);
    kept_[comm].push_back(std::move(p.value()));
    n_.fetch_add(1, std::memory_order_release);
    if (last) return MPI_SUCCESS;
  }
}

int ProbedMessages::take_matched(MPI_Comm comm, MPI_Message* msg, MPI_Status& st) {
  if (!maybe_header(comm, st)) return MPI_SUCCESS;
  auto p = receive(comm, msg, st);
  if (!p) {
    LOOM_LOG(kError, kMpi, "matched probe: %s", p.status().message().c_str());
    return MPI_ERR_OTHER;
  }
  probed_status(p.value(), st);
  *msg = hold(std::move(p.value()));
  return MPI_SUCCESS;
}

MPI_Message ProbedMessages::hold(Probed p) {
  auto owned = std::make_unique<Probed>(std::move(p));
  std::lock_guard<std::mutex> lk(mu_);
  MPI_Message m = make_handle<MPI_Message>(owned.get(), next_id_++);
  held_[handle_key(m)] = std::move(owned);
  n_held_.fetch_add(1, std::memory_order_release);
  return m;
}

bool ProbedMessages::redeem(MPI_Message m, Probed* out) {
  if (!holding()) return false;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = held_.find(handle_key(m));
  if (it == held_.end()) return false;
  *out = std::move(*it->second);
  held_.erase(it);
  n_held_.fetch_sub(1, std::memory_order_release);
  return true;
}

void probed_status(const Probed& p, MPI_Status& st) {
  st.MPI_SOURCE = p.source;
  st.MPI_TAG = p.tag;
  st.MPI_ERROR = MPI_SUCCESS;
  MPI_Status_set_elements_x(&st, MPI_BYTE, static_cast<MPI_Count>(p.size()));
  MPI_Status_set_cancelled(&st, 0);
}

bool take_probed(MPI_Comm comm, int source, int tag, Probed* out) {
  Runtime* rt = runtime();
  return rt && rt->probed && !rt->probed->empty() && rt->probed->find(comm, source, tag, true, out);
}

namespace {

int done_query(void* extra, MPI_Status* st) {
  *st = *static_cast<MPI_Status*>(extra);
  return st->MPI_ERROR;
}
int done_free(void* extra) {
  delete static_cast<MPI_Status*>(extra);
  return MPI_SUCCESS;
}
int done_cancel(void*, int) {
  return MPI_SUCCESS;
}

}  // namespace

int completed_request(const MPI_Status& st, MPI_Request* req) {
  auto* keep = new MPI_Status(st);
  int rc = PMPI_Grequest_start(done_query, done_free, done_cancel, keep, req);
  if (rc != MPI_SUCCESS) {
    delete keep;
    return rc;
  }
  return PMPI_Grequest_complete(*req);
}

}  // namespace loom::mpi
