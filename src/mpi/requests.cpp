#include "mpi/requests.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include "mpi/coll_call.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "type/from_mpi.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::mpi {

void keep_type(PendingOp& op, MPI_Datatype type) {
  op.mpi_type = type;
  op.type_copy.reset();
  if (type == MPI_DATATYPE_NULL || type::is_named(type)) return;  // they live as long as the MPI
  MPI_Datatype copy = MPI_DATATYPE_NULL;
  if (PMPI_Type_dup(type, &copy) != MPI_SUCCESS) return;
  op.type_copy = std::shared_ptr<MPI_Datatype>(new MPI_Datatype(copy), [](MPI_Datatype* t) {
    int done = 0;
    if (PMPI_Finalized(&done) == MPI_SUCCESS && !done) PMPI_Type_free(t);
    delete t;
  });
}

PendingOp host_recv_op(void* buf, int count, MPI_Datatype type, MPI_Comm comm, size_t bytes) {
  PendingOp op;
  op.kind = PendingOp::Kind::kHostRecv;
  if (bytes > 0) op.bytes = std::make_shared<std::vector<char>>(bytes);
  op.user = buf;
  op.count = count;
  keep_type(op, type);
  op.comm = comm;
  return op;
}

void RequestTable::add(MPI_Request r, PendingOp op) {
  stats::Scope phase(stats::kTableAdd);
  // A device-method send on a handle the MPI has shared before, and
  // complete now: its pack goes to the shared mark, not under the handle,
  // where another thread's completion of the same handle could take it and
  // its own completion (finding nothing) would not wait for the pack.
  bool shared_now = false;
  if (op.packing && r != MPI_REQUEST_NULL) {
    bool known = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      known = std::find(shared_.begin(), shared_.end(), r) != shared_.end();
    }
    int done = 0;
    if (known && PMPI_Request_get_status(r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
      shared_now = true;
  }
  if (r != MPI_REQUEST_NULL && !shared_now) {
    std::lock_guard<std::mutex> lk(mu_);
    if (ops_.try_emplace(r, std::move(op)).second) {  // op stays put when r is held already
      n_.fetch_add(1, std::memory_order_release);
      return;
    }
  }
  // r is held already. A pending request's handle is its own until it
  // completes, but the MPI may give one handle to many operations it
  // completed at once: Open MPI's ompi_request_empty (sends it sent inline,
  // MPI_PROC_NULL, collectives on one process), MPICH's built-in completed
  // requests. Such an op is finished now; the op held for r is finished by
  // whichever completion of r comes first, as they are all complete.
  int done = 1;
  MPI_Status st{};
  if (r != MPI_REQUEST_NULL) PMPI_Request_get_status(r, &done, &st);
  if (done) {
    LOOM_DEBUG(kMpi, "request table: a request the MPI completed at once (shared handle)");
    if (op.packing && r != MPI_REQUEST_NULL) {
      // A device-method send whose header went inline: its pack may still
      // read the user's buffer, so the next completion call on this handle
      // waits for it (and for any other such send's: packs end in order).
      std::lock_guard<std::mutex> lk(mu_);
      if (!shared_packing_) n_.fetch_add(1, std::memory_order_release);
      shared_packing_ = std::max(shared_packing_, op.packing);
      if (std::find(shared_.begin(), shared_.end(), r) == shared_.end()) shared_.push_back(r);
      op.packing = 0;
    }
    const int rc = finish(op, st);
    if (rc != MPI_SUCCESS)
      LOOM_LOG(kError, kMpi, "request table: finishing a completed request failed (%d)", rc);
    return;
  }
  // r is pending, and yet an op was held for it: a completion path missed
  // the op of r's earlier use.
  LOOM_LOG(kError, kMpi, "request table: a completed request's op was still held");
  std::lock_guard<std::mutex> lk(mu_);
  if (ops_.insert_or_assign(r, std::move(op)).second) n_.fetch_add(1, std::memory_order_release);
}

bool RequestTable::take(MPI_Request r, PendingOp* out) {
  if (empty() || r == MPI_REQUEST_NULL) return false;
  uint64_t packing = 0;
  bool found = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = ops_.find(r);
    if (it != ops_.end()) {
      *out = std::move(it->second);
      ops_.erase(it);
      n_.fetch_sub(1, std::memory_order_release);
      found = true;
    }
    // A shared handle may also stand for sends whose ops were finished at
    // once (another thread's op was held for it): their packs too. The mark
    // stays until its pack is done: another thread completing the same
    // handle meanwhile must wait for it as well.
    if (shared_packing_ && std::find(shared_.begin(), shared_.end(), r) != shared_.end())
      packing = shared_packing_;
  }
  Runtime* rt = runtime();
  if (packing && rt && rt->rv) {
    rt->rv->wait_packed(packing);
    std::lock_guard<std::mutex> lk(mu_);
    if (shared_packing_ == packing) {  // no later send came meanwhile
      shared_packing_ = 0;
      n_.fetch_sub(1, std::memory_order_release);
    }
  }
  return found;
}

void pull_together(const std::vector<Landed>& landed) {
  Runtime* rt = runtime();
  Rendezvous* rv = rt ? rt->rv.get() : nullptr;
  if (!rv || landed.size() < 2) return;
  struct Pull {
    Landed at;
    Header h;
  };
  std::vector<Pull> pulls;
  std::vector<Landed> unpacked;  // staged messages unpacked in the batch
  std::vector<transport::Mover*> movers;
  std::vector<std::shared_ptr<void>> keep;  // scratch and tables of unpacks in flight
  std::vector<Pull> channel;                // kChannel messages
  struct Opened {
    Landed at;
    Header h;
    const void* src;
    size_t got;
    const transport::Message* from;  // the sender's layout (typed zero-copy), or null
    int device;                      // the GPU src lies on, where known
    const uint32_t* wait_word;       // the pack's ready word, for the GPU to wait on (or null)
    uint32_t wait_value;
  };
  // By landing order; segments whose packs still run are waited for by
  // their movers' GPU work (Mover::gpu_word), or here where it cannot.
  std::vector<Opened> opened;
  // Whole derived-type messages the MPI brought into staging (too small for
  // the device method, or sent staged): their unpacks go in the same batch
  // launches, not one launch and one wait each at completion.
  std::vector<Landed> staged;
  auto add_mover = [&](transport::Mover* m) {
    if (std::find(movers.begin(), movers.end(), m) == movers.end()) movers.push_back(m);
  };
  std::optional<stats::Scope> phase(std::in_place, stats::kPullIssue);
  for (const Landed& l : landed) {
    PendingOp& op = *l.op;
    if (op.finished || op.kind != PendingOp::Kind::kRecv || !op.mover) continue;
    MPI_Count received = 0;
    MPI_Get_elements_x(l.st, MPI_BYTE, &received);
    if (received > static_cast<MPI_Count>(op.staged.bytes)) continue;  // truncated: finish() says
    Header h;
    if (received <= 0 || !rv->is_header(op.staged.host, static_cast<size_t>(received), &h)) {
      int cancelled = 0;
      MPI_Test_cancelled(l.st, &cancelled);
      // Staging a kernel reads (pinned and mapped), or the host engine's.
      const bool readable =
          op.staged.dev || (op.staged.host && op.mover->method() == transport::Method::kHost);
      if (!cancelled && received > 0 && received == op.msg.bytes && readable &&
          !transport::contiguous_at(op.msg, nullptr)) {
        staged.push_back(l);
        add_mover(op.mover);
      }
      continue;
    }
    if (h.kind == kChunks) continue;
    if (h.kind == kChannel) {  // fetched together below
      channel.push_back({l, h});
      continue;
    }
    auto src = [&] {
      stats::Scope o(stats::kOpen);
      return rv->open(h, /*wait=*/false);
    }();
    if (!src) continue;  // finish() opens it again and reports the failure
    const uint32_t* wait_word = nullptr;
    if (src->ready_word) {
      if (rv->gpu_waits())
        if (auto w = op.mover->gpu_word(src->ready_word)) wait_word = w.value();
      if (!wait_word && !rv->wait_ready(h)) continue;  // as a failed open
    }
    const uint64_t got = std::min<uint64_t>(h.bytes, static_cast<uint64_t>(op.msg.bytes));
    opened.push_back({l, h, src->ptr, static_cast<size_t>(got), src->layout, src->device, wait_word,
                      src->ready_value});
    add_mover(op.mover);
  }
  // Each mover's unpacks together: their kernels go in few launches. One
  // that fails is left to finish(), which pulls it again alone.
  for (transport::Mover* m : movers) {
    std::vector<transport::Mover::UnpackItem> items;
    std::vector<const Opened*> of;
    bool waits = false;
    for (const Opened& o : opened)
      if (o.at.op->mover == m) {
        items.push_back({&o.at.op->msg, o.src, o.got, o.at.op->user, o.from, o.device, o.wait_word,
                         o.wait_value});
        of.push_back(&o);
        waits = waits || o.wait_word;
      }
    std::vector<const Landed*> staged_of;
    for (const Landed& l : staged)
      if (l.op->mover == m) {
        const PendingOp& op = *l.op;
        items.push_back({&op.msg, op.staged.dev ? op.staged.dev : op.staged.host,
                         static_cast<size_t>(op.msg.bytes), op.user});
        staged_of.push_back(&l);
      }
    std::vector<Status> each;
    {
      stats::Scope issue(stats::kUnpackIssue);
      if (waits)  // the GPU waits for peers' packs: this rank's go first
        rv->flushed_then([&] { m->unpack_many_async(items, keep, each); });
      else
        m->unpack_many_async(items, keep, each);
    }
    for (size_t i = 0; i < of.size(); ++i)
      if (i < each.size() && each[i].is_ok()) pulls.push_back({of[i]->at, of[i]->h});
    for (size_t i = 0; i < staged_of.size(); ++i)
      if (of.size() + i < each.size() && each[of.size() + i].is_ok())
        unpacked.push_back(*staged_of[i]);
  }
  if (!channel.empty()) {
    phase.reset();
    std::vector<ChannelPull> cp;
    for (Pull& p : channel)
      cp.push_back({&p.h, p.at.op->mover, &p.at.op->msg, p.at.op->user, p.at.st});
    pull_channel_many(*rv, cp);
    for (size_t i = 0; i < cp.size(); ++i) {
      PendingOp& op = *channel[i].at.op;
      op.finished_rc = cp[i].rc;
      op.finished_st = *channel[i].at.st;
      op.finished_st.MPI_ERROR = op.finished_rc;
      op.finished = true;
    }
    phase.emplace(stats::kPullIssue);
  }
  phase.emplace(stats::kPullWait);
  Status s;
  for (transport::Mover* m : movers)
    if (Status w = m->wait_copies(); !w.is_ok()) s = w;
  phase.emplace(stats::kAck);
  if (!s.is_ok())
    LOOM_LOG(kError, kTransport, "device-method receives failed: %s", s.message().c_str());
  if (!unpacked.empty())
    LOOM_DEBUG(kTransport, "%zu staged receives unpacked in one batch", unpacked.size());
  for (const Landed& l : unpacked) {  // staged messages: no ack, nothing to settle
    PendingOp& op = *l.op;
    op.finished_rc = s.is_ok() ? MPI_SUCCESS : MPI_ERR_OTHER;
    op.finished_st = *l.st;
    op.finished_st.MPI_ERROR = op.finished_rc;
    op.finished = true;
  }
  std::vector<const Header*> acks;  // the senders' memory is free either way
  for (const Pull& p : pulls) acks.push_back(&p.h);
  rv->ack_all(acks);
  for (Pull& p : pulls) {
    PendingOp& op = *p.at.op;
    op.finished_rc =
        s.is_ok() ? settle(p.h, static_cast<uint64_t>(op.msg.bytes), *p.at.st) : MPI_ERR_OTHER;
    op.finished_st = *p.at.st;
    op.finished_st.MPI_ERROR = op.finished_rc;
    op.finished = true;
  }
}

void RequestTable::finish_landed(bool throttled) {
  if (empty()) return;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (throttled && now - scanned_ns_.load(std::memory_order_relaxed) < kScanGapNs) return;
  stats::Scope phase(stats::kFinishLanded);
  using K = PendingOp::Kind;
  std::lock_guard<std::mutex> lk(mu_);  // held across: no completion call takes these meanwhile
  std::vector<MPI_Status> sts;
  std::vector<PendingOp*> ops;
  for (auto& [r, op] : ops_) {
    if (op.finished || (op.kind != K::kRecv && op.kind != K::kSpanRecv && op.kind != K::kHostRecv))
      continue;
    int flag = 0;
    MPI_Status st;
    st.MPI_ERROR = MPI_SUCCESS;
    if (peek_locked(r, &op, &flag, &st) != MPI_SUCCESS || !flag) continue;
    if (st.MPI_ERROR != MPI_SUCCESS) continue;  // a failed receive: its completion call reports it
    sts.push_back(st);
    ops.push_back(&op);
  }
  // A scan that found nothing holds the next throttled one off; one that
  // found receives lets it come at once (more may be landing).
  scanned_ns_.store(ops.empty() ? now : 0, std::memory_order_relaxed);
  std::vector<Landed> landed;
  for (size_t i = 0; i < ops.size(); ++i) landed.push_back({ops[i], &sts[i]});
  pull_together(landed);
  for (Landed& l : landed) {
    if (l.op->finished) continue;
    l.op->finished_rc = finish(*l.op, *l.st);
    l.op->finished_st = *l.st;
    l.op->finished = true;
  }
}

bool RequestTable::status_of(MPI_Request r, int* flag, MPI_Status* st, int* rc) {
  if (empty() || r == MPI_REQUEST_NULL) return false;
  using K = PendingOp::Kind;
  Runtime* rt = runtime();
  Rendezvous* rv = rt ? rt->rv.get() : nullptr;
  std::lock_guard<std::mutex> lk(mu_);  // held across: no completion call takes r meanwhile
  auto it = ops_.find(r);
  uint64_t packing = 0;
  if (it != ops_.end())
    packing = it->second.packing;
  else if (std::find(shared_.begin(), shared_.end(), r) != shared_.end())
    packing = shared_packing_;
  if (packing && rv && !rv->packed(packing)) {
    *flag = 0;
    *rc = MPI_SUCCESS;
    return true;
  }
  if (it == ops_.end()) return false;
  PendingOp& op = it->second;
  if (op.kind != K::kRecv && op.kind != K::kSpanRecv && op.kind != K::kHostRecv) return false;
  if (!op.finished) {
    MPI_Status got;
    got.MPI_ERROR = MPI_SUCCESS;
    *rc = peek_locked(r, &op, flag, &got);
    if (*rc != MPI_SUCCESS || !*flag) return true;
    if (got.MPI_ERROR != MPI_SUCCESS) return false;  // the MPI reports its own failure
    op.finished_rc = finish(op, got);
    op.finished_st = got;
    op.finished_st.MPI_ERROR = op.finished_rc;
    op.finished = true;
  }
  *flag = 1;
  *rc = MPI_SUCCESS;
  if (st != MPI_STATUS_IGNORE) *st = op.finished_st;
  return true;
}

namespace {
bool g_peek_deactivates = false;
}

void detect_peek_deactivates() {
  constexpr int kTag = 0x4c4d;
  int in = 0, out = 1;
  MPI_Request rr = MPI_REQUEST_NULL, sr = MPI_REQUEST_NULL;
  if (PMPI_Recv_init(&in, 1, MPI_INT, 0, kTag, MPI_COMM_SELF, &rr) != MPI_SUCCESS) return;
  if (PMPI_Start(&rr) == MPI_SUCCESS &&
      PMPI_Isend(&out, 1, MPI_INT, 0, kTag, MPI_COMM_SELF, &sr) == MPI_SUCCESS) {
    int flag = 0;
    MPI_Status st;
    while (!flag && PMPI_Request_get_status(rr, &flag, &st) == MPI_SUCCESS) {
    }
    MPI_Status again;
    again.MPI_TAG = kTag;
    if (flag && PMPI_Request_get_status(rr, &flag, &again) == MPI_SUCCESS)
      g_peek_deactivates = again.MPI_TAG != kTag;  // an empty status now
    PMPI_Wait(&sr, MPI_STATUS_IGNORE);
    PMPI_Wait(&rr, MPI_STATUS_IGNORE);
  }
  PMPI_Request_free(&rr);
  if (g_peek_deactivates)
    LOOM_INFO(kMpi,
              "the MPI's MPI_Request_get_status deactivates complete persistent requests: "
              "Loom keeps their statuses when it looks at them");
}

void ack_truncated_header(PendingOp& op, int err) {
  int cls = MPI_SUCCESS;
  if (err != MPI_SUCCESS) PMPI_Error_class(err, &cls);
  Runtime* rt = runtime();
  if (cls == MPI_ERR_TRUNCATE && op.kind == PendingOp::Kind::kRecv && rt && rt->rv)
    rt->rv->ack_if_truncated_header(op.staged.host, op.staged.bytes);
}

int RequestTable::peek_locked(MPI_Request r, PendingOp* op, int* flag, MPI_Status* st) {
  stats::Scope phase(stats::kPeek);
  if (op && op->peeked) {  // the MPI's own status is empty now
    *flag = 1;
    if (st != MPI_STATUS_IGNORE) *st = op->peeked_st;
    return op->peeked_st.MPI_ERROR;
  }
  MPI_Status got;
  got.MPI_ERROR = MPI_SUCCESS;
  const int rc = PMPI_Request_get_status(r, flag, &got);
  if (st != MPI_STATUS_IGNORE) *st = got;
  if (!g_peek_deactivates || !*flag || r == MPI_REQUEST_NULL) return rc;
  got.MPI_ERROR = rc;
  if (op) {
    op->peeked = true;
    op->peeked_st = got;
  } else {
    PendingOp done;
    done.kind = PendingOp::Kind::kDone;
    done.done = got;
    done.peeked = true;
    done.peeked_st = got;
    if (ops_.try_emplace(r, std::move(done)).second) n_.fetch_add(1, std::memory_order_release);
  }
  return rc;
}

int RequestTable::peek(MPI_Request r, int* flag, MPI_Status* st) {
  if (!g_peek_deactivates) return PMPI_Request_get_status(r, flag, st);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = ops_.find(r);
  return peek_locked(r, it == ops_.end() ? nullptr : &it->second, flag, st);
}

bool RequestTable::holds(MPI_Request r, PendingOp::Kind k) {
  if (empty() || r == MPI_REQUEST_NULL) return false;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = ops_.find(r);
  return it != ops_.end() && it->second.kind == k;
}

void RequestTable::detach(MPI_Request r, PendingOp op) {
  std::lock_guard<std::mutex> lk(mu_);
  detached_.emplace_back(r, std::move(op));
  n_.fetch_add(1, std::memory_order_release);
}

void RequestTable::add_persistent(MPI_Request r, PendingOp op) {
  std::lock_guard<std::mutex> lk(mu_);
  if (op.kind == PendingOp::Kind::kColl) n_colls_.fetch_add(1, std::memory_order_release);
  persistent_.insert_or_assign(r, std::move(op));
}

void RequestTable::started(MPI_Request r) {
  PendingOp op;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = persistent_.find(r);
    if (it == persistent_.end()) return;
    op = it->second;  // a copy: the template stays for the next start
  }
  add(r, std::move(op));
}

bool RequestTable::persistent_template(MPI_Request r, PendingOp* out) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = persistent_.find(r);
  if (it == persistent_.end()) return false;
  *out = it->second;
  return true;
}

void RequestTable::forget_persistent(MPI_Request r) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = persistent_.find(r);
  if (it == persistent_.end()) return;
  if (it->second.kind == PendingOp::Kind::kColl) n_colls_.fetch_sub(1, std::memory_order_release);
  persistent_.erase(it);
}

void RequestTable::progress() {
  if (empty()) return;
  std::vector<std::pair<PendingOp, MPI_Status>> done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < detached_.size();) {
      int flag = 0;
      MPI_Status st;
      LOOM_NEXT(MPI_Test)(&detached_[i].first, &flag, &st);
      if (!flag) {
        ++i;
        continue;
      }
      // A persistent request stays, inactive now: freed as the user asked.
      if (detached_[i].first != MPI_REQUEST_NULL) PMPI_Request_free(&detached_[i].first);
      done.emplace_back(std::move(detached_[i].second), st);
      detached_[i] = std::move(detached_.back());
      detached_.pop_back();
      n_.fetch_sub(1, std::memory_order_release);
    }
  }
  // A freed receive still lands in the user's buffer (MPI semantics).
  for (auto& [op, st] : done) finish(op, st);
}

void RequestTable::drain() {
  std::vector<std::pair<MPI_Request, PendingOp>> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    all.swap(detached_);
  }
  for (auto& [r, op] : all) {
    MPI_Status st;
    LOOM_NEXT(MPI_Wait)(&r, &st);
    if (r != MPI_REQUEST_NULL) PMPI_Request_free(&r);  // persistent, inactive now
    n_.fetch_sub(1, std::memory_order_release);
    finish(op, st);
  }
}

int finish(PendingOp& op, MPI_Status& st) {
  if (op.finished) {  // by finish_early: the MPI's status says 128 bytes for a header
    st = op.finished_st;
    st.MPI_ERROR = op.finished_rc;
    return op.finished_rc;
  }
  if (op.kind == PendingOp::Kind::kDone) {  // the MPI's request was never started
    st = op.done;
    return st.MPI_ERROR;
  }
  if (op.peeked) {  // the MPI's own status is empty now
    st = op.peeked_st;
    if (st.MPI_ERROR != MPI_SUCCESS) return st.MPI_ERROR;
  }
  // Before the status is read: an MPI need not fill in a collective's.
  if (op.kind == PendingOp::Kind::kColl && op.sched) {  // the round's error code came
    st.MPI_ERROR = persistent_result(*op.sched);
    return st.MPI_ERROR;
  }
  if (op.kind == PendingOp::Kind::kColl) {
    Status s = op.mirrors->up();
    if (s.is_ok()) return MPI_SUCCESS;
    LOOM_LOG(kError, kMpi, "collective into device memory failed: %s", s.message().c_str());
    return error_class(s.code());
  }
  if (op.kind == PendingOp::Kind::kZeroSend) {
    // The ack came, so the header was received: its send is complete.
    if (op.header != MPI_REQUEST_NULL) LOOM_NEXT(MPI_Wait)(&op.header, MPI_STATUS_IGNORE);
    Runtime* rt = runtime();
    if (rt && rt->rv) rt->rv->acked(op.seq);
    st.MPI_ERROR = MPI_SUCCESS;
    return MPI_SUCCESS;
  }
  if (op.packing) {  // the user's buffer is free once the GPU has packed it
    Runtime* rt = runtime();
    if (rt && rt->rv) rt->rv->wait_packed(op.packing);
  }
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  if (cancelled || op.kind == PendingOp::Kind::kSend) return MPI_SUCCESS;
  if (op.kind == PendingOp::Kind::kHostRecv && op.bytes)
    return finish_bytes_recv(op.bytes->data(), op.user, op.count, op.completion_type(), op.comm,
                             st);
  if (op.kind == PendingOp::Kind::kHostRecv)
    return check_typed_recv(op.user, op.count, op.completion_type(), op.comm, st);
  MPI_Count received = 0;
  MPI_Get_elements_x(&st, MPI_BYTE, &received);
  if (received == MPI_UNDEFINED || received < 0) received = 0;
  // A truncated receive whose status counts the whole message (Open MPI's
  // MPI_Request_get_status of one, before the call that reports the error):
  // no more than the staging holds was written, and nothing is read past it.
  if ((op.kind == PendingOp::Kind::kRecv || op.kind == PendingOp::Kind::kNativeRecv) &&
      received > static_cast<MPI_Count>(op.staged.bytes)) {
    st.MPI_ERROR = MPI_ERR_TRUNCATE;
    return MPI_ERR_TRUNCATE;
  }
  Runtime* rt = runtime();
  Rendezvous* rv = rt ? rt->rv.get() : nullptr;
  Status s;
  if (op.kind == PendingOp::Kind::kNativeRecv) {
    s = op.mover->unpack_from(op.msg, op.staged.dev, static_cast<size_t>(received), op.user);
  } else if (op.kind == PendingOp::Kind::kRecv) {
    Header h;
    if (rv && rv->is_header(op.staged.host, static_cast<size_t>(received), &h))
      return pull_into_device(*rv, h, *op.mover, op.msg, op.user, st);
    s = op.mover->unpack(op.msg, op.staged, static_cast<size_t>(received), op.user);
  } else {  // the whole span comes back: gaps are as they were sent down
    char* host_view = static_cast<char*>(op.staged.host) - op.span_lo;
    const int rc = check_typed_recv(host_view, op.count, op.completion_type(), op.comm, st);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_TRUNCATE) return rc;
    s = op.mover->copy_from_host(static_cast<char*>(op.user) + op.span_lo, op.staged.host,
                                 op.staged.bytes);
    if (s.is_ok()) return rc;
  }
  if (!s.is_ok()) {
    LOOM_LOG(kError, kMpi, "receive into device memory failed: %s", s.message().c_str());
    return MPI_ERR_OTHER;
  }
  return MPI_SUCCESS;
}

}  // namespace loom::mpi
