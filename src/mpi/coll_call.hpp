// One interposed collective call and the buffers it was given. Each device
// buffer gets a host mirror of the bytes its data spans (gaps included), so
// the MPI's own collective runs on host memory with the caller's counts,
// types and op: every collective, datatype and op (user-defined ones too)
// is then the MPI's own semantics, and each rank decides for itself, so
// ranks may mix host and device buffers freely. Faster engines (the
// node-local one in src/coll) take over where every rank agrees to them.
//
//   Call c(comm, "MPI_Alltoall");
//   c.buffers(s, sc, st, r, rc, rt, comm);                      // the pointers, as given
//   c.in(s, c.size() * sc, st);  c.out(r, c.size() * rc, rt);   // s, r: host mirrors once run
//   return c.blocking([&] { return LOOM_NEXT(MPI_Alltoall)(s, sc, st, r, rc, rt, comm); });
//
// Mirrors are pinned staging from the transport's movers; a nonblocking or
// persistent call keeps them in its request's op until it completes.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "transport/mover.hpp"

namespace loom::mpi {

// The device buffers of one call, mirrored on the host.
class MirrorSet {
 public:
  struct Entry {
    char* user = nullptr;  // the caller's pointer
    int64_t lo = 0;        // the data's bytes: [user + lo, user + hi)
    int64_t hi = 0;
    bool in = false;    // copied down before the MPI runs
    bool gaps = false;  // ...only for the bytes the MPI leaves alone (not an input)
    bool out = false;   // copied back up once it is done
    transport::Staged staged;
    transport::Mover* mover = nullptr;
    char* host() const { return static_cast<char*>(staged.host) - lo; }
  };
  std::vector<Entry> entries;
  // Inputs (and outputs with gaps) to the host; `inputs_only`: not the
  // outputs (an MPI_Start, whose MPI may have written them at _init).
  Status down(bool inputs_only = false) const;
  Status up() const;  // outputs back to the device
};

class Call {
 public:
  Call(MPI_Comm comm, const char* fn);
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Every buffer argument of the call as the caller gave it, significant on
  // this rank or not (the other arguments are skipped): the pointers the MPI
  // is given must alias one another as these do (stage()). coll.cpp passes
  // each call's whole argument list.
  template <class... A>
  void buffers(const A&... args) {
    (buffer(args), ...);
  }

  bool active() const { return active_; }
  int rank() const { return rank_; }
  // Group size (the remote group's for an inter-communicator).
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  bool inter_comm() const { return inter_; }
  const char* fn() const { return fn_; }

  // A buffer of `count` elements of `type`: when it is device memory, buf
  // is replaced by its host mirror (before the MPI runs; buffers whose data
  // overlap share one mirror). MPI_IN_PLACE and host buffers stay.
  template <class P>
  void in(P& buf, int64_t count, MPI_Datatype type) {
    add(buf, count, type, true, false, setter(buf));
  }
  template <class P>
  void out(P& buf, int64_t count, MPI_Datatype type) {
    add(buf, count, type, false, true, setter(buf));
  }
  template <class P>
  void inout(P& buf, int64_t count, MPI_Datatype type) {
    add(buf, count, type, true, true, setter(buf));
  }
  // The v and w forms: n blocks of counts[i] elements at displs[i] (in
  // extents of type for v, in bytes with per-block types for w).
  template <class P>
  void v(P& buf, int n, const int* counts, const int* displs, MPI_Datatype type, bool in,
         bool out) {
    add_v(buf, n, counts, displs, type, in, out, setter(buf));
  }
  template <class P>
  void w(P& buf, int n, const int* counts, const MPI_Aint* displs, const MPI_Datatype* types,
         bool in, bool out) {
    add_w(buf, n, counts, displs, types, in, out, setter(buf));
  }

  // Runs `mpi` (the MPI's collective, on the host mirrors): inputs go down
  // first, outputs come back up after. Errors go through comm's handler.
  int blocking(const std::function<int()>& mpi);
  // The nonblocking form: `mpi` starts it; the outputs come up when *req completes.
  int nonblocking(MPI_Request* req, const std::function<int()>& mpi);
  // The persistent form: `mpi` is the MPI's _init; each MPI_Start copies
  // the inputs down, each completion the outputs up.
  int persistent(MPI_Request* req, const std::function<int()>& mpi);

  // The neighbour counts of comm's topology; false (and the call fails
  // with MPI_ERR_TOPOLOGY) when it has none, or when Loom is not active.
  bool neighbors(int* indegree, int* outdegree);

  // Some buffer of the call is device memory.
  bool mirrored() const { return !pending_.empty() || (set_ && !set_->entries.empty()); }
  struct Range;  // the bytes a buffer's data spans (coll_call.cpp)

  // An argument error found while registering (0: none).
  int error() const { return err_; }

  // A nonblocking call: the engines may run it as a schedule of messages
  // whose request goes to *req (coll_schedule.hpp); null for the others.
  MPI_Request* request() const { return req_; }
  // `persistent`: each MPI_Start of a persistent request runs the schedule.
  void schedule_into(MPI_Request* req, bool persistent = false) {
    req_ = req;
    persistent_ = persistent;
  }
  bool persistent_form() const { return persistent_; }

 private:
  using Setter = std::function<void(void*)>;  // puts the mirror in the caller's argument
  template <class P>
  static Setter setter(P& buf) {
    return [&buf](void* p) { buf = static_cast<P>(p); };
  }
  void add(const void* buf, int64_t count, MPI_Datatype type, bool in, bool out, Setter set);
  void add_v(const void* buf, int n, const int* counts, const int* displs, MPI_Datatype type,
             bool in, bool out, Setter set);
  void add_w(const void* buf, int n, const int* counts, const MPI_Aint* displs,
             const MPI_Datatype* types, bool in, bool out, Setter set);
  // A buffer whose data [buf + lo, buf + hi) is device memory, to mirror.
  struct Pending {
    const char* user;
    int64_t lo, hi;
    bool dense, in, out;
    Setter set;
    const char* mpi = nullptr;  // what the MPI is given for `user`, once staged
  };
  void add_range(const void* buf, const Range& r, bool in, bool out, Setter set);
  template <class A>
  void buffer(const A& a) {
    if constexpr (std::is_same_v<A, void*> || std::is_same_v<A, const void*>)
      if (n_args_ < kMaxArgs) args_[n_args_++] = a;
  }
  // Stages the pending buffers: overlapping ones share a mirror.
  void stage();
  // Pendings [i, j) share the mirror `e`, whose first byte is the data at
  // `lo`: gives them their pointers in staging s, at the first multiple of
  // kAliasStep from its start where none of them is another buffer's pointer.
  bool place(size_t i, size_t j, const char* lo, transport::Staged s, size_t bytes,
             MirrorSet::Entry& e);
  // `mpi`, given to the MPI for the caller's `user`, equals the pointer of
  // another buffer argument (or MPI_IN_PLACE, MPI_BOTTOM). Pendings [i, j)
  // are skipped.
  bool aliases(const char* mpi, const char* user, size_t i, size_t j) const;
  void inter(const void* buf);
  int fail(int mpi_class, const char* what);
  int check_before_run();
  // The nonblocking and persistent forms: the op that finishes *req.
  int with_request(MPI_Request* req, const std::function<int()>& mpi, bool persistent);

  MPI_Comm comm_;
  const char* fn_;
  bool active_ = false;
  bool inter_ = false;
  int rank_ = 0, size_ = 1;
  int err_ = MPI_SUCCESS;
  MPI_Request* req_ = nullptr;
  bool persistent_ = false;
  const char* err_what_ = nullptr;
  std::vector<Pending> pending_;
  std::shared_ptr<MirrorSet> set_;
  static constexpr size_t kAliasStep = 64;  // keeps the staging's alignment to 64 bytes
  static constexpr int kMaxArgs = 4;        // a collective has two buffer arguments
  const void* args_[kMaxArgs] = {};
  int n_args_ = 0;
};

// The neighbour counts of a topology communicator (MPI_ERR_TOPOLOGY when
// it has none).
int neighbor_counts(MPI_Comm comm, int* indegree, int* outdegree);

}  // namespace loom::mpi
