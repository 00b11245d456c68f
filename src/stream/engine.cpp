#include "stream/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#if LOOM_HAVE_CUDA
#include "pack/free_gate.hpp"
#endif
#include "stream/enqueue.hpp"
#include "stream/pair.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::stream {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::shared_ptr<Channel>> Channel::create(std::shared_ptr<Lane> lane) {
  auto ch = std::make_shared<Channel>();
  auto w = lane->alloc(sizeof(uint32_t) * 16 * (kSlots + 1));
  if (!w) return w.status();
  std::memset(w->host, 0, w->bytes);
  ch->lane_ = std::move(lane);
  ch->words_ = std::move(w.value());
#if LOOM_HAVE_CUDA
  // While the channel lives its stream may wait for Loom's threads: CUDA
  // frees wait for the device then (pack/free_gate.hpp).
  ch->gate_ = std::make_shared<pack::FreeGateHold>();
#endif
  ch->gen_.assign(kSlots, 0);
  for (int i = kSlots - 1; i >= 0; --i) ch->free_.push_back(i);
  return ch;
}

Result<uint32_t> Channel::mark() {
  (void)flush();  // a failure is said there; this position is another matter
  ++seq_;
  LOOM_TRY(lane_->write(static_cast<uint32_t*>(words_.host), seq_));
  return seq_;
}

Result<uint32_t> Channel::run_mark(const LaneJob* jobs, size_t n) {
  (void)flush();  // a failure is said there; these jobs are another matter
  ++seq_;
  LOOM_TRY(lane_->run_many_write(jobs, n, static_cast<uint32_t*>(words_.host), seq_));
  return seq_;
}

std::atomic<long long> Channel::held_packs_{0};

Result<uint32_t> Channel::hold_pack(const transport::Message& m, const void* src, void* dst,
                                    const mpi::TypeRegistry::Entry& keep, bool* first) {
  LOOM_TRY(lane_->prepare(m));  // its errors to this call, not to a later flush
  *first = held_.empty();
  const uint32_t at = ++seq_;
  held_.push_back(Held{m, src, dst, keep});
  held_packs_.fetch_add(1, std::memory_order_relaxed);
  // Mostly earlier sends' packs: a failure is said there, not this call's.
  if (held_.size() >= kHeldMax) (void)flush();
  return at;
}

Status Channel::flush() {
  if (held_.empty()) return Status::ok();
  stats::Scope phase(stats::kEnqueueHeld);
  std::vector<LaneJob> jobs;
  jobs.reserve(held_.size());
  for (const Held& h : held_) jobs.push_back(LaneJob{&h.m, h.src, h.dst, true, nullptr});
  auto* position = static_cast<uint32_t*>(words_.host);
  Status s = lane_->run_many_write(jobs.data(), jobs.size(), position, seq_);
  held_.clear();
  if (!s) {
    // The sends' triggers must still come, or their peers wait for ever:
    // they go with what their staging holds, and the error is said.
    LOOM_LOG(kError, kMpi, "enqueued sends: their packs could not be enqueued: %s",
             s.message().c_str());
    (void)lane_->write(position, seq_);
  }
  return s;
}

uint32_t Channel::position() const {
  return reinterpret_cast<const std::atomic<uint32_t>*>(words_.host)
      ->load(std::memory_order_acquire);
}

Slot Channel::take() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(slot_mu_);
      if (!free_.empty()) {
        Slot s;
        s.index = free_.back();
        free_.pop_back();
        s.value = ++gen_[s.index];
        return s;
      }
    }
    // Every word waits on an operation: let them finish, held sends too
    // (their trigger is what lets them go; take() runs under mu()).
    if (!held_.empty()) (void)flush();
    std::this_thread::yield();
  }
}

void Channel::release(const Slot& s) {
  if (s.index < 0) return;
  reinterpret_cast<std::atomic<uint32_t>*>(word(s.index))
      ->store(s.value, std::memory_order_release);
  // The word may be handed out again: its next value is larger, so a stream
  // still waiting for this one passes as well (it was released).
  std::lock_guard<std::mutex> lk(slot_mu_);
  free_.push_back(s.index);
}

Engine::Engine() : pairs_(std::make_unique<Pairs>()) {
  tracing_ = !knobs().stream_trace.empty();
  post_pass_delay_us_ = std::atol(knobs().test_post_pass_delay_us.c_str());
  hold_on_ = knob_true(knobs().stream_hold);
  LOOM_NEXT(MPI_Comm_dup)(MPI_COMM_WORLD, &world_);
  LOOM_NEXT(MPI_Comm_dup)(MPI_COMM_WORLD, &answers_);
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) tag_ub_ = *static_cast<int*>(ub);
}

int Engine::keyval(MPI_Comm_delete_attr_function* on_free) {
  std::lock_guard<std::mutex> lk(mu_);
  if (keyval_ == MPI_KEYVAL_INVALID)
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_free, &keyval_, nullptr);
  return keyval_;
}

Engine::~Engine() {
  shutdown();
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
  }
  flush_held();  // the sends the progress thread will wait for
  {
    std::lock_guard<std::mutex> lk(held_mu_);
    flush_stop_ = true;
  }
  held_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  flush_held();  // held meanwhile
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    stopping_.store(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Incoming* n = drain(); n;) {  // handed over after the thread ended
    if (n->op)
      LOOM_WARN(kMpi, "finalize: an enqueued operation was handed over after the engine stopped");
    for (MPI_Request& r : n->frees) LOOM_NEXT(MPI_Request_free)(&r);
    Incoming* next = n->next;
    delete n;
    n = next;
  }
  if (tracing_) write_trace();
#if LOOM_HAVE_CUDA
  // Nothing makes a stream wait for Loom any more: frees go from here on.
  pack::FreeGate::get().drain();
#endif
  {
    std::lock_guard<std::mutex> lk(hs_mu_);
    host_streams_.clear();
  }
  cuda_lanes_release();
  if (keyval_ != MPI_KEYVAL_INVALID) MPI_Comm_free_keyval(&keyval_);
  pairs_->sweep(true);
  if (world_ != MPI_COMM_NULL) LOOM_NEXT(MPI_Comm_free)(&world_);
  if (answers_ != MPI_COMM_NULL) LOOM_NEXT(MPI_Comm_free)(&answers_);
}

void Engine::submit(std::shared_ptr<Op> op) {
  if (tracing_) op->t_enqueued = now_ns();
  op->ch->in_flight.fetch_add(1);
  if (!started_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { run(); });
    started_.store(true, std::memory_order_release);
  }
  push(new Incoming{std::move(op), nullptr, {}, {}});
}

void Engine::later(std::vector<MPI_Request> frees, std::vector<std::shared_ptr<void>> drops) {
  if (frees.empty() && drops.empty()) return;
  push(new Incoming{nullptr, nullptr, std::move(frees), std::move(drops)});
}

// Lock-free: the thread polls the inbox without a lock, so an enqueue call
// never waits for it (a mutex taken by both, each time, cost the halo's
// enqueue calls a futex sleep now and then: 1.5 us a hand-over at the mean).
void Engine::push(Incoming* n) {
  Incoming* head = inbox_.load(std::memory_order_relaxed);
  do {
    n->next = head;
  } while (
      !inbox_.compare_exchange_weak(head, n, std::memory_order_seq_cst, std::memory_order_relaxed));
  // Seen asleep after the push: it may have checked the inbox before it, so
  // wake it (under mu_, which it holds until it waits).
  if (sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_one();
  }
}

void Engine::held_one() {
  last_hold_ns_.store(now_ns(), std::memory_order_relaxed);
}

void Engine::holding(std::shared_ptr<Channel> ch) {
  held_one();
  std::lock_guard<std::mutex> lk(held_mu_);
  if (!flusher_.joinable() && !flush_stop_) flusher_ = std::thread([this] { flusher(); });
  if (held_chans_.empty()) first_hold_ns_ = now_ns();
  held_chans_.push_back(std::move(ch));
  n_held_.store(static_cast<int>(held_chans_.size()), std::memory_order_release);
  if (held_chans_.size() == 1) held_cv_.notify_all();
}

// Takes the list under held_mu_ and counts it as being flushed.
std::vector<std::shared_ptr<Channel>> Engine::take_held_locked() {
  std::vector<std::shared_ptr<Channel>> chans;
  chans.swap(held_chans_);
  urgent_ = false;
  // Counted as flushing before the list reads empty: flush_held's fast
  // path reads n_held_ first, then flushing_.
  if (!chans.empty()) {
    flushing_.fetch_add(1, std::memory_order_seq_cst);
  }
  n_held_.store(0, std::memory_order_seq_cst);
  return chans;
}

void Engine::flush_list(std::vector<std::shared_ptr<Channel>>& chans, bool restore) {
  for (auto& ch : chans) {
    std::lock_guard<std::mutex> lk(ch->mu());
    // Its device for the launch, whichever thread flushes (a later call of
    // the program may have another device current); the program's own
    // current device back after it (not on the flusher: making device 0
    // current there would make its context).
    const int was = ch->lane().enter_for_now();
    (void)ch->flush();  // a failure is said there, and the triggers still go
    if (restore) ch->lane().leave(was);
  }
  if (chans.empty()) return;
  chans.clear();
  std::lock_guard<std::mutex> lk(held_mu_);
  flushing_.fetch_sub(1, std::memory_order_release);
  held_cv_.notify_all();
}

void Engine::flush_held() {
  if (n_held_.load(std::memory_order_seq_cst) == 0 &&
      flushing_.load(std::memory_order_seq_cst) == 0)
    return;
  std::vector<std::shared_ptr<Channel>> chans;
  {
    std::lock_guard<std::mutex> lk(held_mu_);
    chans = take_held_locked();
  }
  flush_list(chans, /*restore=*/true);
  // A list another thread took (the flusher) may still be on its way to
  // the streams: the caller's stream may wait for what it holds.
  std::unique_lock<std::mutex> lk(held_mu_);
  held_cv_.wait(lk, [&] { return flushing_.load() == 0; });
}

void Engine::flush_soon() {
  if (n_held_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lk(held_mu_);
  if (urgent_ || held_chans_.empty()) return;  // a polling loop asks once
  urgent_ = true;
  held_cv_.notify_all();
}

void Engine::flusher() {
  std::unique_lock<std::mutex> lk(held_mu_);
  for (;;) {
    held_cv_.wait(lk, [&] { return flush_stop_ || !held_chans_.empty(); });
    if (flush_stop_) return;
    // Once no pack has been held for kHoldUs (a burst goes on batching, and
    // the program's next call usually comes first and finds nothing left),
    // when a completion call asks, or kHoldMaxUs after the first hold.
    for (;;) {
      const int64_t now = now_ns();
      const int64_t idle = now - last_hold_ns_.load(std::memory_order_relaxed);
      const int64_t age = now - first_hold_ns_;
      if (urgent_ || held_chans_.empty() || idle >= kHoldUs * 1000 || age >= kHoldMaxUs * 1000)
        break;
      const int64_t wait = std::min(kHoldUs * 1000 - idle, kHoldMaxUs * 1000 - age);
      held_cv_.wait_for(lk, std::chrono::nanoseconds(wait), [&] { return flush_stop_ || urgent_; });
      if (flush_stop_) return;
    }
    auto chans = take_held_locked();
    lk.unlock();
    flush_list(chans, /*restore=*/false);
    lk.lock();
  }
}

Engine::Incoming* Engine::drain() {
  Incoming* got = inbox_.exchange(nullptr, std::memory_order_acquire);
  Incoming* fifo = nullptr;  // pushed last first: reversed into call order
  while (got) {
    Incoming* next = got->next;
    got->next = fifo;
    fifo = got;
    got = next;
  }
  return fifo;
}

void Engine::put(Kind k, uintptr_t key, std::shared_ptr<void> obj) {
  std::lock_guard<std::mutex> lk(reg_mu_);
  reg_[{static_cast<int>(k), key}] = std::move(obj);
}

std::shared_ptr<void> Engine::get(Kind k, uintptr_t key) {
  std::lock_guard<std::mutex> lk(reg_mu_);
  auto it = reg_.find({static_cast<int>(k), key});
  return it == reg_.end() ? nullptr : it->second;
}

std::shared_ptr<void> Engine::take(Kind k, uintptr_t key) {
  std::lock_guard<std::mutex> lk(reg_mu_);
  auto it = reg_.find({static_cast<int>(k), key});
  if (it == reg_.end()) return nullptr;
  auto obj = std::move(it->second);
  reg_.erase(it);
  return obj;
}

Result<std::shared_ptr<Lane>> Engine::lane_for(void* stream) {
  if (HostStream* h = host_stream(stream)) return std::shared_ptr<Lane>(make_host_lane(h));
  auto l = make_cuda_lane(stream);
  if (!l) return l.status();
  return std::shared_ptr<Lane>(std::move(l.value()));
}

void* Engine::host_stream_create() {
  auto s = std::make_unique<HostStream>();
  void* key = s.get();
  std::lock_guard<std::mutex> lk(hs_mu_);
  host_streams_.emplace(key, std::move(s));
  return key;
}

bool Engine::host_stream_free(void* s) {
  std::unique_ptr<HostStream> gone;
  {
    std::lock_guard<std::mutex> lk(hs_mu_);
    auto it = host_streams_.find(s);
    if (it == host_streams_.end()) return false;
    gone = std::move(it->second);
    host_streams_.erase(it);
  }
  return true;  // its destructor finishes the queued work
}

HostStream* Engine::host_stream(void* s) {
  std::lock_guard<std::mutex> lk(hs_mu_);
  auto it = host_streams_.find(s);
  return it == host_streams_.end() ? nullptr : it->second.get();
}

bool Engine::post(Op& op) {
  op.ch->lane().enter();
  int rc = MPI_SUCCESS;
  LOOM_DEBUG(kMpi, "stream thread: posting %s %d x %p with peer %d, tag %d",
             op.kind == Op::Kind::kSend ? "send" : "receive", op.count,
             op.kind == Op::Kind::kSend ? op.sbuf : op.rbuf, op.peer, op.tag);
  // A lent segment's pack is behind the stream's trigger: the receiver may
  // read it once the header is there. (An early send's stream flags it.)
  if (op.lent_seq && !op.early) runtime()->rv->stream_packed(op.lent_seq);
  switch (op.kind) {
    case Op::Kind::kSend:
      rc = op.raw
               ? LOOM_NEXT(MPI_Isend)(op.sbuf, op.count, op.type, op.peer, op.tag, op.comm, &op.req)
               : MPI_Isend(op.sbuf, op.count, op.type, op.peer, op.tag, op.comm, &op.req);
      break;
    case Op::Kind::kRecv:
      rc = op.raw
               ? LOOM_NEXT(MPI_Irecv)(op.rbuf, op.count, op.type, op.peer, op.tag, op.comm, &op.req)
               : MPI_Irecv(op.rbuf, op.count, op.type, op.peer, op.tag, op.comm, &op.req);
      break;
    case Op::Kind::kAllreduce:
      rc = LOOM_NEXT(MPI_Iallreduce)(op.sbuf, op.rbuf, op.count, op.type, op.op, op.comm, &op.req);
      break;
  }
  host_actions.fetch_add(1, std::memory_order_relaxed);
  if (op.early)
    (op.kind == Op::Kind::kSend ? early_sends : early_receives)
        .fetch_add(1, std::memory_order_relaxed);
  LOOM_DEBUG(kMpi, "stream thread: posted (%d)", rc);
  op.posted = true;
  op.posted_at = std::chrono::steady_clock::now();
  if (tracing_) op.t_posted = now_ns();
  if (rc != MPI_SUCCESS) {
    // Its arguments were checked when it was enqueued: the caller cannot be
    // told any more, so this is an error line (tests fail on it).
    LOOM_LOG(kError, kMpi, "enqueued operation: the MPI refused it (error %d)", rc);
    op.req = MPI_REQUEST_NULL;
    op.st.MPI_ERROR = rc;
    return false;
  }
  if (op.release_on_post) {
    op.ch->release(op.slot);
    op.released = true;
  }
  return true;
}

bool Engine::test(Op& op) {
  if (op.req == MPI_REQUEST_NULL) return true;
  int flag = 0;
  MPI_Status st;
  const int rc = op.raw ? LOOM_NEXT(MPI_Test)(&op.req, &flag, &st) : MPI_Test(&op.req, &flag, &st);
  if (rc != MPI_SUCCESS) {
    op.st.MPI_ERROR = rc;
    op.req = MPI_REQUEST_NULL;
    return true;
  }
  if (!flag) return false;
  if (op.kind == Op::Kind::kRecv) {
    const int err = op.st.MPI_ERROR;
    op.st = st;
    op.st.MPI_ERROR = err;
  }
  return true;
}

bool Engine::stream_waits(const Op& op) {
  const uint64_t w = op.at_wait.load(std::memory_order_acquire);
  return (w >> 32) && reached(op.ch->position(), static_cast<uint32_t>(w));
}

bool Engine::tail_ready(const Op& op) {
  if (!op.early || !op.tail_fix || op.st.MPI_ERROR != MPI_SUCCESS) return true;
  MPI_Count got = 0;
  MPI_Get_elements_x(&op.st, MPI_BYTE, &got);
  if (got < 0 || static_cast<size_t>(got) >= op.expect) return true;
  // A short message landed before the stream got to the receive: the bytes
  // it leaves are the user's as the stream's work before the receive wrote
  // them, so the fix waits until the stream waits for this receive (which
  // only MPIX_Wait(all)_enqueue arranges: its requests must end there).
  return stream_waits(op);
}

void Engine::finish(Op& op) {
  host_actions.fetch_add(1, std::memory_order_relaxed);
  if (tracing_) op.t_done = now_ns();
  if (op.kind == Op::Kind::kRecv && op.tail_fix && op.st.MPI_ERROR == MPI_SUCCESS) {
    MPI_Count got = 0;
    MPI_Get_elements_x(&op.st, MPI_BYTE, &got);
    if (got >= 0 && static_cast<size_t>(got) < op.expect) {
      // A short message: the stream's unpack writes the whole staging back,
      // so the bytes past what landed must be the user's own.
      Runtime* rt = runtime();
      transport::Mover* mv = rt ? rt->mover(transport::Method::kStaged) : nullptr;
      auto mine = mv ? mv->pack(op.msg, op.user)
                     : Result<transport::Staged>(Status(Err::kInternal, "no mover"));
      if (mine)
        std::memcpy(static_cast<char*>(op.staging.host) + got,
                    static_cast<const char*>(mine->host) + got, op.expect - got);
      else
        LOOM_WARN(kMpi, "short enqueued receive: %s", mine.status().message().c_str());
    }
  }
  if (op.pulled) land(op);
  if (op.own_type) LOOM_NEXT(MPI_Type_free)(&op.type);
  MPI_Request greq = MPI_REQUEST_NULL;
  {
    // The status first: once released, the stream (and then the host) may
    // read it.
    std::lock_guard<std::mutex> lk(op.mu);
    // Before done: whoever sees done (MPIS_Queue_wait) may free the request
    // next, which is refused while a round counts as active.
    if (op.active) op.active->fetch_sub(1);
    op.done = true;
    if (op.status_out) *op.status_out = op.st;
    greq = op.greq;
  }
  // Released once: a send the MPI refused still lets its stream go on.
  if (!op.released) op.ch->release(op.slot);
  if (greq != MPI_REQUEST_NULL) {
    MPI_Grequest_complete(greq);
    bool free_it = false;
    {
      std::lock_guard<std::mutex> lk(op.mu);
      op.greq_complete = true;
      free_it = op.greq_free;
    }
    if (free_it) LOOM_NEXT(MPI_Request_free)(&greq);
  }
}

void Engine::run() {
  Runtime::mark_stream_thread();  // its device messages take non-blocking streams
  std::vector<std::shared_ptr<Op>> waiting, active, retiring;
  std::vector<MPI_Comm> held, held_sends;  // communicators with a receive / send not yet posted
  std::vector<std::pair<Channel*, uint32_t>> positions;  // this pass's lane positions
  std::vector<MPI_Request> gone;                         // completed requests to free
  auto idle_since = std::chrono::steady_clock::now();
  auto last_reap = idle_since;
  constexpr auto kReapEvery = std::chrono::microseconds(20);
  std::chrono::steady_clock::time_point stop_at{};
  for (;;) {
    const bool idle = waiting.empty() && active.empty() && retiring.empty();
    if (idle && !inbox_.load(std::memory_order_relaxed) && !stopping_.load()) {
      std::unique_lock<std::mutex> lk(mu_);
      sleeping_.store(true, std::memory_order_seq_cst);
      cv_.wait(lk, [this] { return stop_ || inbox_.load(std::memory_order_seq_cst) != nullptr; });
      sleeping_.store(false, std::memory_order_relaxed);
    }
    if (inbox_.load(std::memory_order_relaxed)) {
      for (Incoming* n = drain(); n;) {
        if (n->op) waiting.push_back(std::move(n->op));
        gone.insert(gone.end(), n->frees.begin(), n->frees.end());
        Incoming* next = n->next;
        delete n;  // and what it drops
        n = next;
      }
    }
    if (stopping_.load()) {
      if (waiting.empty() && active.empty() && !inbox_.load()) {
        // At finalize (staging a stream may still hold goes with the pools).
        for (MPI_Request& r : gone) LOOM_NEXT(MPI_Request_free)(&r);
        return;
      }
      // At finalize: what a stream never reached cannot finish.
      const auto at = std::chrono::steady_clock::now();
      if (stop_at == std::chrono::steady_clock::time_point{}) stop_at = at;
      if (at - stop_at > std::chrono::seconds(10)) {
        LOOM_WARN(kMpi, "finalize: %zu enqueued operations never reached by their stream",
                  waiting.size() + active.size());
        for (MPI_Request& r : gone) LOOM_NEXT(MPI_Request_free)(&r);
        return;
      }
    }
    for (MPI_Request& r : gone) LOOM_NEXT(MPI_Request_free)(&r);
    gone.clear();
    const auto now = std::chrono::steady_clock::now();  // this pass's clock
    bool did = false;
    // Post in submission order: positions only grow, so an operation whose
    // trigger is reached has every earlier one of its lane reached too. An
    // early receive (send) goes at once unless a receive (send) of its
    // communicator before it still waits for its trigger (matching follows
    // posting order).
    held.clear();
    held_sends.clear();
    // Each lane's position read once a pass: the stream moves on meanwhile,
    // and an operation found short must not be passed by a later one of its
    // lane that a later read finds reached (a burst of held sends went out
    // of call order that way, under load).
    positions.clear();
    auto position_of = [&](Channel* ch) {
      for (const auto& [c, p] : positions)
        if (c == ch) return p;
      positions.emplace_back(ch, ch->position());
      return positions.back().second;
    };
    for (auto it = waiting.begin(); it != waiting.end();) {
      Op& op = **it;
      auto& behind = op.kind == Op::Kind::kSend ? held_sends : held;
      const bool go = op.early ? std::find(behind.begin(), behind.end(), op.comm) == behind.end()
                               : reached(position_of(op.ch.get()), op.start);
      if (!go) {
        if (op.kind != Op::Kind::kAllreduce) behind.push_back(op.comm);
        if (post_pass_delay_us_ > 0)
          std::this_thread::sleep_for(std::chrono::microseconds(post_pass_delay_us_));
        ++it;
        continue;
      }
      did = true;
      post(op);
      active.push_back(std::move(*it));
      it = waiting.erase(it);
    }
    for (auto it = active.begin(); it != active.end();) {
      if (!test(**it) || !tail_ready(**it)) {
        Op& op = **it;
        // An early receive's clock starts when its stream waits for it.
        if (op.early && op.kind == Op::Kind::kRecv && !stream_waits(op)) op.posted_at = now;
        if (!op.overdue && now - op.posted_at > std::chrono::seconds(10)) {
          op.overdue = true;  // a hang shows here first
          LOOM_WARN(kMpi, "enqueued %s with peer %d, tag %d: not complete 10 s after it was posted",
                    op.kind == Op::Kind::kSend   ? "send"
                    : op.kind == Op::Kind::kRecv ? "receive"
                                                 : "allreduce",
                    op.peer, op.tag);
        }
        ++it;
        continue;
      }
      did = true;
      finish(**it);
      retiring.push_back(std::move(*it));
      it = active.erase(it);
    }
    // Staging goes back once the stream is past its last use of it.
    for (auto it = retiring.begin(); it != retiring.end();) {
      const uint64_t r = (*it)->retire.load(std::memory_order_acquire);
      if (!(r >> 32) || !reached((*it)->ch->position(), static_cast<uint32_t>(r))) {
        ++it;
        continue;
      }
      retired(**it);
      if (tracing_) trace(**it);
      (*it)->ch->in_flight.fetch_sub(1);
      it = retiring.erase(it);
    }
    // Segments lent by enqueued sends come back as their acks arrive; a
    // program that only enqueues makes no other call of Loom's to take them.
    if (Runtime* rt = runtime(); rt->rv && rt->rv->lends() && now - last_reap > kReapEvery) {
      rt->rv->progress(/*flush=*/false);
      last_reap = now;
    }
    // An MPI operation in flight is progressed only by our tests (a large
    // message moves a fragment or so per test), so never sleep while one is:
    // sleeping 50 µs between tests made a 16 MiB transfer take 17 ms.
    if (did || !active.empty()) {
      idle_since = now;
      if (!did) std::this_thread::yield();
    } else if (now - idle_since < std::chrono::milliseconds(2)) {
      std::this_thread::yield();  // just busy: the next trigger is likely close
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void Engine::trace(const Op& op) {
  char row[192];
  std::snprintf(row, sizeof(row), "%s,%lld,%d,%d,%d,%lld,%lld,%lld,%lld\n",
                op.kind == Op::Kind::kSend   ? "send"
                : op.kind == Op::Kind::kRecv ? "recv"
                                             : "allreduce",
                static_cast<long long>(op.bytes), op.peer, op.tag, op.pulled || op.lent_seq,
                static_cast<long long>(op.t_enqueued), static_cast<long long>(op.t_posted),
                static_cast<long long>(op.t_done), static_cast<long long>(now_ns()));
  trace_.emplace_back(row);
}

void Engine::write_trace() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string path = knobs().stream_trace + "." + std::to_string(rank) + ".csv";
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    LOOM_WARN(kMpi, "LOOM_STREAM_TRACE: cannot write %s", path.c_str());
    return;
  }
  std::fputs("op,bytes,peer,tag,lent,enqueued_ns,posted_ns,done_ns,retired_ns\n", f);
  for (const std::string& r : trace_) std::fputs(r.c_str(), f);
  std::fclose(f);
}

Engine* engine(MPI_Comm comm, int* rc) {
  *rc = MPI_SUCCESS;
  Runtime* rt = runtime();
  if (!rt || !rt->streams) {
    *rc = mpi::raise(comm, MPI_ERR_OTHER, "Loom is not active: no stream engine");
    return nullptr;
  }
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    *rc = mpi::raise(comm, MPI_ERR_OTHER,
                     "stream communication needs MPI_THREAD_MULTIPLE (Loom's progress thread "
                     "calls the MPI): initialise with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, "
                     "...)");
    return nullptr;
  }
  return rt->streams.get();
}

}  // namespace loom::stream
