// Soak: many device requests in flight at once (MPI_THREAD_MULTIPLE, every
// thread a window of nonblocking sends and receives), random methods
// (loom_set_method, per rank, changed at any time), random sizes, types and
// wildcards (MPI_ANY_SOURCE / MPI_ANY_TAG), random completion calls. Every
// received byte is checked, gaps and the bytes past the message included;
// every message arrives exactly once; the MPI's matching order holds (a
// receive never takes a later message of a sender while an earlier one it
// also matches goes to a receive posted after it); at the end Loom's staging
// and lent memory is back at zero and its request table empty. A round that
// does not finish within --stall seconds is reported as a deadlock.
//
//   mpirun -np 4 loom_soak [--seconds S] [--threads T] [--window W] [--seed N]
//   --device: buffers in GPU memory (the GPU machine); --corrupt data|order:
//   the checks' self-test (a byte flipped, two arrivals swapped, once);
//   --plain with LOOM_DISABLE=1: the MPI alone, to tell its faults from Loom's.
//
// Each thread has its own communicator (a dup of MPI_COMM_WORLD), so the
// order of its sends and receives is its program order. A round: every rank
// knows the whole round's schedule (from the seed); each thread posts its
// receives (exact ones first, then one kind of wildcard, so any matching
// the MPI makes completes), sends its messages, completes everything, checks,
// and agrees with its peers (an allreduce on its communicator) whether to go on.
// Run in the host-as-device mode (or --device) with LOOM_METHOD=device at
// start-up, so that every method can be switched to.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "mpi/runtime.hpp"

#if LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Opts {
  double seconds = 20;
  int threads = 8;
  int window = 160;  // messages each thread of each rank sends per round
  uint64_t seed = 20261123;
  double stall = 120;   // seconds without a round finished: a deadlock
  bool device = false;  // buffers in GPU memory (CUDA builds), not the host test mode
  bool plain = false;   // the MPI alone (LOOM_DISABLE=1): tells the MPI's faults from Loom's
  std::string corrupt;  // self-test: "data" or "order" is spoilt once and must be reported
};

int g_rank = 0, g_size = 1;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "SOAK FAIL rank %d: %s\n", g_rank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// The element types: four ints each, with gaps and out of order, so that
// any sender's type matches any receiver's (signatures of 4n ints).
constexpr int kTypes = 4;
struct Elem {
  int extent;  // ints
  int off[4];  // where the element's k-th int lies (type map order)
};
const Elem kElem[kTypes] = {{4, {0, 1, 2, 3}},   // contiguous(4, INT)
                            {5, {0, 1, 3, 4}},   // vector(2, 2, 3, INT)
                            {5, {2, 3, 4, 0}},   // indexed({3, 1}, {2, 0}, INT)
                            {6, {0, 1, 3, 4}}};  // vector(2, 2, 3) resized to 6 ints
MPI_Datatype g_types[kTypes];

void make_types() {
  MPI_Type_contiguous(4, MPI_INT, &g_types[0]);
  MPI_Type_vector(2, 2, 3, MPI_INT, &g_types[1]);
  int bl[2] = {3, 1}, dp[2] = {2, 0};
  MPI_Type_indexed(2, bl, dp, MPI_INT, &g_types[2]);
  MPI_Datatype v;
  MPI_Type_vector(2, 2, 3, MPI_INT, &v);
  MPI_Type_create_resized(v, 0, 6 * sizeof(int), &g_types[3]);
  MPI_Type_free(&v);
  for (MPI_Datatype& t : g_types) MPI_Type_commit(&t);
}

constexpr int kSentinel = 0x5A5A5A5A, kGarbage = 0x0BADBAD0;

// Int idx of message (src, seq): the first element is a header.
int value(int src, int seq, int tag, int n, int idx) {
  switch (idx) {
    case 0:
      return src;
    case 1:
      return seq;
    case 2:
      return tag;
    case 3:
      return n;
    default:
      return static_cast<int>((static_cast<uint32_t>(src) * 2654435761u) ^
                              (static_cast<uint32_t>(seq) * 40503u) ^
                              static_cast<uint32_t>(idx) * 97u);
  }
}

enum Style { kExact, kAnySource, kAnyTag, kAnyBoth };
const char* style_name(int s) {
  static const char* n[] = {"exact", "any-source", "any-tag", "any-both"};
  return n[s];
}

struct Msg {
  int src, dst, tag, n, stype, seq;
};

struct Round {
  int style;
  std::vector<Msg> msgs;  // in each sender's send order
};

// The whole round of one thread, as every rank computes it. `seq`: per
// (src, dst) the messages sent so far on this thread's communicator.
Round schedule(const Opts& o, int thread, int64_t round, std::vector<int>& seq) {
  std::mt19937_64 rng(o.seed * 1000003u + static_cast<uint64_t>(thread) * 7919u +
                      static_cast<uint64_t>(round) * 104729u);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Round r;
  r.style = pick(0, 3);
  // Every fourth round the full window (the most requests in flight), the
  // others smaller, for more rounds, methods and wildcard mixes a minute.
  const int window = round % 4 == 0 ? o.window : pick(1, std::max(1, o.window / 4));
  for (int s = 0; s < g_size; ++s)
    for (int m = 0; m < window; ++m) {
      Msg x;
      x.src = s;
      x.dst = pick(0, g_size - 1);
      x.tag = pick(0, 7);
      const int k = pick(0, 99);
      // Mostly small; some past the pipelining threshold. Receives that take
      // any message are as big as the biggest, so any-both rounds stay small.
      if (k < 3)
        x.n = 0;
      else if (k < 90 || r.style == kAnyBoth)
        x.n = pick(1, k < 80 ? 16 : 256);
      else if (k < 99)
        x.n = pick(257, 2048);
      else
        x.n = pick(2049, 8192);
      x.stype = pick(0, kTypes - 1);
      x.seq = seq[s * g_size + x.dst]++;
      r.msgs.push_back(x);
    }
  return r;
}

// Where the buffers the MPI calls get live: the host vectors themselves, or
// (--device) copies in one device arena a thread, grown as needed.
class Arena {
 public:
  explicit Arena(bool device) : device_(device) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
#if LOOM_HAVE_CUDA
    if (base_) cudaFree(base_);
#endif
  }
  // Room for a round's buffers (ints).
  void reset(size_t ints) {
    used_ = 0;
    if (!device_ || ints <= cap_) return;
#if LOOM_HAVE_CUDA
    if (base_) cudaFree(base_);
    base_ = nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, ints * sizeof(int)) != cudaSuccess) fail("cudaMalloc");
    base_ = static_cast<int*>(p);
    cap_ = ints;
#endif
  }
  // The pointer the MPI gets for h (device mode: a copy of h).
  int* place(std::vector<int>& h) {
    if (!device_) return h.data();
    int* p = base_ + used_;
    used_ += h.size();
#if LOOM_HAVE_CUDA
    if (cudaMemcpy(p, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess)
      fail("cudaMemcpy");
#endif
    return p;
  }
  // Back into h what the MPI left at p.
  void fetch(const int* p, std::vector<int>& h) {
    if (!device_) return;
#if LOOM_HAVE_CUDA
    if (cudaMemcpy(h.data(), p, h.size() * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess)
      fail("cudaMemcpy");
#else
    (void)p, (void)h;
#endif
  }

 private:
  bool device_;
  int* base_ = nullptr;
  size_t cap_ = 0, used_ = 0;
};

struct Recv {
  int src = 0, tag = 0;  // the spec (MPI_ANY_SOURCE / MPI_ANY_TAG)
  int rtype = 0, cap = 0;
  std::vector<int> buf;
  int* ptr = nullptr;  // what the MPI got: buf, or its device copy
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Status st{};
  const Msg* got = nullptr;
};

bool matches(const Recv& r, const Msg& m) {
  return (r.src == MPI_ANY_SOURCE || r.src == m.src) && (r.tag == MPI_ANY_TAG || r.tag == m.tag);
}

struct Stats {
  int64_t rounds = 0, messages = 0, bytes = 0, wild = 0, empty = 0, switches = 0;
  int64_t style[4] = {};
};

std::atomic<int64_t> g_progress_ms[64];
// Where each thread is, for the deadlock report: its round and phase.
std::atomic<int64_t> g_round[64];
std::atomic<int> g_phase[64];
const char* kPhase[] = {"posting receives", "sending", "completing", "checking", "agreeing"};
std::atomic<bool> g_done{false};
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// The requests of the array complete() is given that are receives (the first ones).
thread_local size_t g_receives = 0;

constexpr int kUnwritten = -77;
const char* kHow[] = {"MPI_Waitall", "MPI_Waitany", "MPI_Testsome", "MPI_Test/MPI_Wait"};

// Completes every request of `reqs` with a completion call drawn per round.
void complete(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& sts, int how) {
  const int n = static_cast<int>(reqs.size());
  if (n == 0) return;
  switch (how) {
    case 0:
      if (MPI_Waitall(n, reqs.data(), sts.data()) != MPI_SUCCESS) fail("MPI_Waitall failed");
      return;
    case 1: {
      std::vector<bool> seen(n, false);  // each request is reported once
      for (int left = n; left > 0; --left) {
        int idx = kUnwritten;  // an index the call left unwritten shows as such
        MPI_Status st;
        if (MPI_Waitany(n, reqs.data(), &idx, &st) != MPI_SUCCESS || idx == MPI_UNDEFINED)
          fail("MPI_Waitany failed");
        if (idx == kUnwritten)
          fail("MPI_Waitany returned without writing the index, after " + std::to_string(n - left) +
               " reports of " + std::to_string(n));
        if (idx < 0 || idx >= n || seen[idx]) {
          MPI_Count bytes = -1;
          MPI_Get_elements_x(&st, MPI_BYTE, &bytes);
          fail("MPI_Waitany reported request " + std::to_string(idx) + " of " + std::to_string(n) +
               (static_cast<size_t>(idx) < g_receives ? " (a receive)" : " (a send)") +
               " again, after " + std::to_string(n - left) + " reports; its handle is " +
               (reqs[idx] == MPI_REQUEST_NULL ? "MPI_REQUEST_NULL" : "not null") +
               "; status source " + std::to_string(st.MPI_SOURCE) + " tag " +
               std::to_string(st.MPI_TAG) + " bytes " + std::to_string(bytes) + " error " +
               std::to_string(st.MPI_ERROR));
        }
        if (reqs[idx] != MPI_REQUEST_NULL) {
          int flag = -1;
          MPI_Status g;
          MPI_Request_get_status(reqs[idx], &flag, &g);
          fail("MPI_Waitany reported request " + std::to_string(idx) + " of " + std::to_string(n) +
               (static_cast<size_t>(idx) < g_receives ? " (a receive)" : " (a send)") +
               " and left it active (status: complete " + std::to_string(flag) + ", source " +
               std::to_string(st.MPI_SOURCE) + " tag " + std::to_string(st.MPI_TAG) + ", error " +
               std::to_string(st.MPI_ERROR) + ")");
        }
        seen[idx] = true;
        sts[idx] = st;
      }
      return;
    }
    case 2: {
      std::vector<int> idx(n);
      std::vector<MPI_Status> got(n);
      for (int left = n; left > 0;) {
        int outc = 0;
        if (MPI_Testsome(n, reqs.data(), &outc, idx.data(), got.data()) != MPI_SUCCESS ||
            outc == MPI_UNDEFINED)
          fail("MPI_Testsome failed");
        for (int i = 0; i < outc; ++i) {
          if (idx[i] < 0 || idx[i] >= n || reqs[idx[i]] != MPI_REQUEST_NULL)
            fail("MPI_Testsome reported request " + std::to_string(idx[i]) + " and left it active");
          sts[idx[i]] = got[i];
        }
        left -= outc;
        if (outc == 0) std::this_thread::yield();
      }
      return;
    }
    default: {
      // One by one, in a random order, MPI_Test polling and MPI_Wait.
      std::vector<int> idx(n);
      for (int i = 0; i < n; ++i) idx[i] = i;
      std::reverse(idx.begin(), idx.end());
      for (int i : idx) {
        int flag = 0;
        for (int k = 0; k < 3 && !flag; ++k) MPI_Test(&reqs[i], &flag, &sts[i]);
        if (!flag && MPI_Wait(&reqs[i], &sts[i]) != MPI_SUCCESS) fail("MPI_Wait failed");
      }
    }
  }
}

void check_round(const Round& r, std::vector<Recv>& recvs, int thread, int64_t round,
                 bool spoil_order, const std::string& how) {
  const std::string where = "thread " + std::to_string(thread) + " round " + std::to_string(round) +
                            " (" + style_name(r.style) + "): ";
  std::vector<const Msg*> mine;
  for (const Msg& m : r.msgs)
    if (m.dst == g_rank) mine.push_back(&m);
  std::vector<bool> taken(mine.size(), false);
  for (Recv& v : recvs) {
    const Elem& e = kElem[v.rtype];
    int n = -1;
    MPI_Get_count(&v.st, g_types[v.rtype], &n);
    const int src = v.st.MPI_SOURCE, tag = v.st.MPI_TAG;
    if (n < 0 || n > v.cap)
      fail(where + "count " + std::to_string(n) + " of " + std::to_string(v.cap));
    // Which message: the header, or for an empty one its envelope.
    const Msg* m = nullptr;
    size_t at = 0;
    for (; at < mine.size(); ++at) {
      const Msg& c = *mine[at];
      if (taken[at] || c.src != src || c.tag != tag || c.n != n) continue;
      if (n == 0 || (v.buf[e.off[0]] == c.src && v.buf[e.off[1]] == c.seq)) {
        m = &c;
        break;
      }
    }
    if (!m) {
      // What the receive asked for, its whole status, and what it could have taken.
      MPI_Count bytes = -1;
      MPI_Get_elements_x(&v.st, MPI_BYTE, &bytes);
      std::string could;
      for (size_t c = 0; c < mine.size(); ++c)
        if (matches(v, *mine[c]))
          could += " [from " + std::to_string(mine[c]->src) + " tag " +
                   std::to_string(mine[c]->tag) + " n " + std::to_string(mine[c]->n) + " seq " +
                   std::to_string(mine[c]->seq) + (taken[c] ? " taken]" : "]");
      fail(where + "a message from " + std::to_string(src) + " tag " + std::to_string(tag) +
           " count " + std::to_string(n) + " header " + std::to_string(v.buf[e.off[0]]) + "/" +
           std::to_string(v.buf[e.off[1]]) + " that was not sent, or arrived twice (receive " +
           std::to_string(&v - recvs.data()) + " of " + std::to_string(recvs.size()) + ": source " +
           std::to_string(v.src) + " tag " + std::to_string(v.tag) + " type " +
           std::to_string(v.rtype) + " cap " + std::to_string(v.cap) + "; status error " +
           std::to_string(v.st.MPI_ERROR) + " bytes " + std::to_string(bytes) + "; " + how +
           "; it matches" + could + ")");
    }
    if (!matches(v, *m)) fail(where + "a receive took a message it does not match");
    taken[at] = true;
    v.got = m;
    // Every int: the message's data where the type puts it, the sentinel elsewhere.
    std::vector<int> want(v.buf.size(), kSentinel);
    for (int el = 0; el < n; ++el)
      for (int k = 0; k < 4; ++k)
        want[static_cast<size_t>(el) * e.extent + e.off[k]] =
            value(m->src, m->seq, m->tag, m->n, el * 4 + k);
    if (want != v.buf) {
      size_t i = 0;
      while (want[i] == v.buf[i]) ++i;
      fail(where + "message from " + std::to_string(m->src) + " seq " + std::to_string(m->seq) +
           " (" + std::to_string(n) + " elements, send type " + std::to_string(m->stype) +
           ", receive type " + std::to_string(v.rtype) + "): int " + std::to_string(i) + " is " +
           std::to_string(v.buf[i]) + ", want " + std::to_string(want[i]));
    }
  }
  for (size_t i = 0; i < mine.size(); ++i)
    if (!taken[i])
      fail(where + "message from " + std::to_string(mine[i]->src) + " seq " +
           std::to_string(mine[i]->seq) + " never arrived");
  if (spoil_order)  // self-test: two receives' messages swapped must be reported
    for (size_t i = 0; i < recvs.size(); ++i)
      for (size_t j = i + 1; j < recvs.size(); ++j) {
        const Msg *a = recvs[i].got, *b = recvs[j].got;
        if (a->src == b->src && a->n && b->n && matches(recvs[i], *b) && matches(recvs[j], *a)) {
          std::swap(recvs[i].got, recvs[j].got);
          i = j = recvs.size();
        }
      }
  // Non-overtaking: receive i was posted before j; if i also matches what j
  // got from the same sender, j's message must be the later one.
  for (size_t i = 0; i < recvs.size(); ++i)
    for (size_t j = i + 1; j < recvs.size(); ++j) {
      const Msg *a = recvs[i].got, *b = recvs[j].got;
      if (a->src != b->src || a->n == 0 || b->n == 0) continue;  // empty ones carry no seq
      if (matches(recvs[i], *b) && a->seq > b->seq)
        fail(where + "order: a receive posted earlier took seq " + std::to_string(a->seq) +
             " from " + std::to_string(a->src) + " while a later one took seq " +
             std::to_string(b->seq) + ", which the earlier one matches too");
    }
}

void worker(const Opts& o, int thread, MPI_Comm comm, Stats& s) {
  Arena arena(o.device);
  std::vector<int> seq(static_cast<size_t>(g_size) * g_size, 0);
  std::mt19937_64 rng(o.seed ^ (static_cast<uint64_t>(g_rank) << 32) ^
                      static_cast<uint64_t>(thread));
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.seconds));
  static const char* methods[] = {"device", "oneshot", "staged", "auto"};
  for (int64_t round = 0;; ++round) {
    g_progress_ms[thread] = now_ms();
    g_round[thread] = round;
    g_phase[thread] = 0;
    if (pick(0, 3) == 0 && loom_set_method(methods[pick(0, 3)]) == MPI_SUCCESS) ++s.switches;
    const Round r = schedule(o, thread, round, seq);
    ++s.style[r.style];
    // Receives: each expected message gives one, exact or wildcarded as the
    // round's style says; exact ones are posted first.
    std::vector<Recv> recvs;
    for (const Msg& m : r.msgs) {
      if (m.dst != g_rank) continue;
      Recv v;
      const bool exact = r.style == kExact || pick(0, 2) == 0;
      v.src = exact || r.style == kAnyTag ? m.src : MPI_ANY_SOURCE;
      v.tag = exact || r.style == kAnySource ? m.tag : MPI_ANY_TAG;
      v.rtype = pick(0, kTypes - 1);
      recvs.push_back(std::move(v));
    }
    std::stable_partition(recvs.begin(), recvs.end(), [](const Recv& v) {
      return v.src != MPI_ANY_SOURCE && v.tag != MPI_ANY_TAG;
    });
    size_t ints = 0;
    for (Recv& v : recvs) {
      v.cap = 0;  // the biggest message it may take
      for (const Msg& m : r.msgs)
        if (m.dst == g_rank && matches(v, m)) v.cap = std::max(v.cap, m.n);
      v.buf.assign(static_cast<size_t>(v.cap) * kElem[v.rtype].extent + 4, kSentinel);
      ints += v.buf.size();
    }
    for (const Msg& m : r.msgs)
      if (m.src == g_rank) ints += static_cast<size_t>(m.n) * kElem[m.stype].extent + 1;
    arena.reset(ints);
    for (Recv& v : recvs) {
      s.wild += v.src == MPI_ANY_SOURCE || v.tag == MPI_ANY_TAG;
      v.ptr = arena.place(v.buf);
      if (MPI_Irecv(v.ptr, v.cap, g_types[v.rtype], v.src, v.tag, comm, &v.req) != MPI_SUCCESS)
        fail("MPI_Irecv failed");
    }
    g_phase[thread] = 1;
    // Sends, in schedule order; a few requests are freed instead of completed.
    std::vector<std::vector<int>> sbufs;
    std::vector<MPI_Request> sreqs;
    for (const Msg& m : r.msgs) {
      if (m.src != g_rank) continue;
      const Elem& e = kElem[m.stype];
      std::vector<int> b(static_cast<size_t>(m.n) * e.extent + 1, kGarbage);
      for (int el = 0; el < m.n; ++el)
        for (int k = 0; k < 4; ++k)
          b[static_cast<size_t>(el) * e.extent + e.off[k]] =
              value(m.src, m.seq, m.tag, m.n, el * 4 + k);
      MPI_Request q;
      if (MPI_Isend(arena.place(b), m.n, g_types[m.stype], m.dst, m.tag, comm, &q) != MPI_SUCCESS)
        fail("MPI_Isend failed");
      if (pick(0, 49) == 0)
        MPI_Request_free(&q);  // completes on its own; the buffer lives to the round's end
      else
        sreqs.push_back(q);
      sbufs.push_back(std::move(b));
      ++s.messages;
      s.bytes += static_cast<int64_t>(m.n) * 16;
      s.empty += m.n == 0;
    }
    g_phase[thread] = 2;
    // Everything completes, receives and sends in one array or apart.
    const int how = pick(0, 3);
    const bool together = pick(0, 1);
    if (together) {
      std::vector<MPI_Request> all;
      for (Recv& v : recvs) all.push_back(v.req);
      all.insert(all.end(), sreqs.begin(), sreqs.end());
      std::vector<MPI_Status> sts(all.size());
      g_receives = recvs.size();
      complete(all, sts, how);
      for (size_t i = 0; i < recvs.size(); ++i) recvs[i].st = sts[i];
    } else {
      std::vector<MPI_Request> rq;
      for (Recv& v : recvs) rq.push_back(v.req);
      std::vector<MPI_Status> sts(rq.size()), ssts(sreqs.size());
      g_receives = rq.size();
      complete(rq, sts, how);
      g_receives = 0;
      for (size_t i = 0; i < recvs.size(); ++i) recvs[i].st = sts[i];
      complete(sreqs, ssts, (how + 1) % 4);
    }
    g_phase[thread] = 3;
    for (Recv& v : recvs) arena.fetch(v.ptr, v.buf);
    const bool spoil = g_rank == 0 && thread == 0 && round >= 1;
    if (spoil && o.corrupt == "data")
      for (Recv& v : recvs) {
        int n = 0;
        MPI_Get_count(&v.st, g_types[v.rtype], &n);
        if (n < 2) continue;
        v.buf[static_cast<size_t>(n - 1) * kElem[v.rtype].extent + kElem[v.rtype].off[3]] ^= 0x100;
        break;
      }
    check_round(
        r, recvs, thread, round, spoil && o.corrupt == "order",
        "completed by " + std::string(kHow[how]) + (together ? " with the sends" : " apart"));
    ++s.rounds;
    // Everyone's receives are done before anyone sends the next round
    // (wildcards would take the next round's messages); rank 0's clock decides.
    g_phase[thread] = 4;
    int stop = Clock::now() >= end ? 1 : 0, any = 0;
    MPI_Allreduce(&stop, &any, 1, MPI_INT, MPI_MAX, comm);
    if (any) break;
  }
  g_progress_ms[thread] = -1;  // finished
}

bool parse(int argc, char** argv, Opts* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--device") {
      o->device = true;
      continue;
    }
    if (k == "--plain") {
      o->plain = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (k == "--seconds")
      o->seconds = std::atof(v);
    else if (k == "--minutes")
      o->seconds = 60 * std::atof(v);
    else if (k == "--threads")
      o->threads = std::atoi(v);
    else if (k == "--window")
      o->window = std::atoi(v);
    else if (k == "--seed")
      o->seed = std::strtoull(v, nullptr, 10);
    else if (k == "--stall")
      o->stall = std::atof(v);
    else if (k == "--corrupt")
      o->corrupt = v;
    else
      return false;
  }
  return o->threads >= 1 && o->threads <= 64 && o->window >= 1;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: mpirun -np 4 loom_soak [--seconds S | --minutes M] [--threads T] "
                 "[--window W] [--seed N] [--stall S] [--device] [--corrupt data|order] "
                 "[--plain]\n");
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (g_rank == 0) std::printf("loom_soak: the MPI gives no MPI_THREAD_MULTIPLE: skipped\n");
    MPI_Finalize();
    return 77;
  }
  loom::Runtime* rt = loom::runtime();
  if (!rt && !o.plain) fail("Loom is not active");
  if (rt && o.plain) fail("--plain: run with LOOM_DISABLE=1");
  if (o.device) {
    int gpus = 0;
#if LOOM_HAVE_CUDA
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
#endif
    if (gpus == 0) {
      if (g_rank == 0)
        std::printf("loom_soak --device: no GPU in this build or machine: skipped\n");
      MPI_Finalize();
      return 77;
    }
  } else if (rt && !rt->host_as_device()) {
    fail("run in the host-as-device mode (LOOM_TEST_HOST_AS_DEVICE=1), or with --device");
  }
  make_types();
  std::vector<MPI_Comm> comms(o.threads);
  for (MPI_Comm& c : comms) MPI_Comm_dup(MPI_COMM_WORLD, &c);

  std::vector<Stats> stats(o.threads);
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int t = 0; t < o.threads; ++t) {
    g_progress_ms[t] = now_ms();
    threads.emplace_back(worker, std::cref(o), t, comms[t], std::ref(stats[t]));
  }
  // The watchdog: a thread that finishes no round for o.stall seconds is stuck.
  std::thread watchdog([&] {
    while (!g_done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      for (int t = 0; t < o.threads; ++t) {
        const int64_t p = g_progress_ms[t];
        if (p >= 0 && now_ms() - p > o.stall * 1000) {
          std::string where;
          for (int u = 0; u < o.threads; ++u)
            where += "; thread " + std::to_string(u) +
                     (g_progress_ms[u] < 0 ? std::string(" done")
                                           : " round " + std::to_string(g_round[u].load()) + " " +
                                                 kPhase[g_phase[u].load()]);
          fail("deadlock: thread " + std::to_string(t) + " finished no round in " +
               std::to_string(static_cast<int>(o.stall)) + " s" + where);
        }
      }
    }
  });
  for (auto& th : threads) th.join();
  g_done = true;
  watchdog.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();

  for (MPI_Comm& c : comms) MPI_Comm_free(&c);
  const size_t types_before = rt ? rt->types.size() : 0;
  for (MPI_Datatype& t : g_types) MPI_Type_free(&t);
  MPI_Barrier(MPI_COMM_WORLD);
  // Nothing left behind: staging and lent memory, requests (freed sends
  // finish in the table's progress), types.
  for (int i = 0; rt && i < 100 && (!rt->requests.empty() || rt->bytes_in_use() != 0); ++i) {
    rt->requests.progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (rt && rt->bytes_in_use() != 0)
    fail(std::to_string(rt->bytes_in_use()) + " staging bytes still in use after the soak");
  if (rt && !rt->requests.empty()) fail("Loom's request table is not empty after the soak");
  if (rt && rt->types.size() != types_before - kTypes)
    fail("type registry holds " + std::to_string(rt->types.size()) + " entries after freeing " +
         std::to_string(kTypes) + " of " + std::to_string(types_before));

  Stats sum;
  for (const Stats& s : stats) {
    sum.rounds += s.rounds, sum.messages += s.messages, sum.bytes += s.bytes;
    sum.wild += s.wild, sum.empty += s.empty, sum.switches += s.switches;
    for (int i = 0; i < 4; ++i) sum.style[i] += s.style[i];
  }
  int64_t mine[10] = {sum.rounds,   sum.messages, sum.bytes,    sum.wild,     sum.empty,
                      sum.switches, sum.style[0], sum.style[1], sum.style[2], sum.style[3]};
  int64_t all[10];
  MPI_Reduce(mine, all, 10, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf(
        "loom_soak: %d ranks x %d threads, %.1f s: %lld rounds, %lld messages (%lld empty, "
        "%.1f MiB), up to %d requests in flight (%d sends + %d receives a thread), %lld "
        "wildcard receives, rounds exact/any-source/any-tag/any-both %lld/%lld/%lld/%lld, "
        "%lld method switches; every byte checked, order kept, pools back at zero\n",
        g_size, o.threads, secs, static_cast<long long>(all[0] / g_size),
        static_cast<long long>(all[1]), static_cast<long long>(all[4]), all[2] / 1048576.0,
        2 * o.window * g_size * o.threads, o.window, o.window, static_cast<long long>(all[3]),
        static_cast<long long>(all[6]), static_cast<long long>(all[7]),
        static_cast<long long>(all[8]), static_cast<long long>(all[9]),
        static_cast<long long>(all[5]));
  MPI_Finalize();
  return 0;
}
