#include "mpi/coll_nccl_nb.hpp"

#include <climits>
#include <memory>
#include <vector>

#include "coll/nccl_engine.hpp"
#include "mpi/blocking.hpp"
#include "mpi/coll_schedule.hpp"
#include "mpi/device_message.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/errors.hpp"
#include "mpi/runtime.hpp"
#include "mpi/type_registry.hpp"
#include "util/log.hpp"

namespace loom::mpi::nccl_nb {
namespace {

using Mode = Runtime::CollMethod;

// Alike on every rank: the setting, the size each rank receives, the
// communicator. In auto only where the schedules cannot run (they serve a
// node, every rank's GPU reachable through CUDA IPC).
bool gate(const Call& c, int64_t bytes) {
  Runtime* rt = runtime();
  if (!rt->coll_nccl_nonblocking || !c.request() || !c.active() || c.error() != MPI_SUCCESS ||
      c.inter_comm() || c.size() < 2 || bytes <= 0 || rt->host_as_device())
    return false;
  const Mode m = rt->coll_method.load(std::memory_order_relaxed);
  if (m == Mode::kAuto) {
    if (bytes < rt->coll_schedule_min) return false;
    if (rt->rv && rt->rv->lends() && rt->rv->all_on_node(c.comm())) return false;
  } else if (m != Mode::kNccl) {
    return false;
  }
  if (!coll::nccl::usable(c.comm(), collective_wait())) return false;
  // Made here, with the first-use set-up that already synchronises the
  // ranks, not at a later MPI_Start (a local call).
  Status st = coll::nccl::prepare(c.comm());
  if (!st.is_ok()) LOOM_WARN(kMpi, "%s: NCCL: %s", c.fn(), st.message().c_str());
  return true;  // alike: a rank whose set-up failed reports it at launch
}

// gate() for a call in which each rank receives `rcount` elements of rt
// from every rank; *size: rt's size.
bool gate_blocks(const Call& c, int rcount, MPI_Datatype rt, int* size) {
  return rcount > 0 && rt != MPI_DATATYPE_NULL && PMPI_Type_size(rt, size) == MPI_SUCCESS &&
         gate(c, int64_t{rcount} * *size * c.size());
}

// One buffer of the call as one run of device bytes (`at`): as it lies, or
// device scratch that fill() loads from the user's buffer when the call is
// launched and drain() unloads into it when it completes. A rank takes
// part whatever its buffer: its peers' NCCL work waits for its own.
struct Side {
  void* user = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  size_t bytes = 0;
  char* at = nullptr;
  bool direct = false;  // at is the user's own memory
  bool device = false;
  TypeRegistry::Entry entry;  // device, not direct: the type, while in use
  // Host: the handle drain() unpacks with (the caller may free its type
  // once the call has returned; MPI lets it).
  std::shared_ptr<TypePin> pin;
  transport::Message msg;
  size_t off = 0;  // not direct: where in the scratch

  // A device buffer of a type Loom cannot read: the rank still takes part
  // (its peers' work waits for its own), on scratch, and raises this.
  Status bad;

  Status fill(transport::Mover& mv, MPI_Comm comm) const {
    if (!bad.is_ok()) return bad;
    if (direct || bytes == 0) return Status::ok();
    if (device) return mv.pack_to(msg, user, at);
    std::vector<char> host(bytes);
    int pos = 0;
    if (PMPI_Pack(user, count, type, host.data(), static_cast<int>(bytes), &pos, comm) !=
            MPI_SUCCESS ||
        static_cast<size_t>(pos) != bytes)
      return Status(Err::kMpi, "MPI_Pack of a host buffer for NCCL");
    return mv.copy_from_host(at, host.data(), bytes);
  }
  Status drain(transport::Mover& mv, MPI_Comm comm) const {
    if (!bad.is_ok()) return bad;
    if (direct || bytes == 0) return Status::ok();
    if (device) return mv.unpack_from(msg, at, bytes, user);
    std::vector<char> host(bytes);
    LOOM_TRY(mv.copy_to_host(host.data(), at, bytes));
    int pos = 0;
    if (PMPI_Unpack(host.data(), static_cast<int>(bytes), &pos, user, count, type, comm) !=
        MPI_SUCCESS)
      return Status(Err::kMpi, "MPI_Unpack into a host buffer after NCCL");
    return Status::ok();
  }
};

// Describes `count` elements of t at buf; `copy`: never direct (the
// call's receives overwrite the memory it is read from). False only for
// bad arguments (the MPI's own call raises them; alike where MPI's rules
// make the sizes alike); a device buffer Loom cannot read still takes
// part, on scratch, and fails (Side::bad).
bool side(const void* buf, int64_t count, MPI_Datatype t, bool copy, Side* s, size_t* scratch) {
  int size = 0;
  if (count < 0 || count > INT_MAX || t == MPI_DATATYPE_NULL ||
      PMPI_Type_size(t, &size) != MPI_SUCCESS || int64_t{size} * count > INT_MAX)
    return false;
  s->user = const_cast<void*>(buf);
  s->count = static_cast<int>(count);
  s->type = t;
  s->bytes = static_cast<size_t>(size) * static_cast<size_t>(count);
  if (s->bytes == 0) return true;
  if (!buf) return false;
  s->device = on_device(buf, s->count, t);
  if (s->device) {
    auto e = runtime()->types.lookup(t);
    if (!e || !fill_message(*e.value(), s->count, &s->msg) ||
        s->msg.bytes != static_cast<int64_t>(s->bytes)) {
      s->bad = Status(Err::kUnsupported, "a device buffer of a datatype Loom cannot read");
      s->off = *scratch;
      *scratch += s->bytes;
      return true;
    }
    s->entry = e.value();
    int64_t base = 0;
    if (!copy && transport::contiguous_at(s->msg, &base)) {
      s->direct = true;
      s->at = static_cast<char*>(s->user) + base;
      return true;
    }
  }
  if (!s->device) s->pin = std::make_shared<TypePin>(t);
  s->off = *scratch;
  *scratch += s->bytes;
  return true;
}

// The call's schedule: scratch for the sides that need it, `issue` queued
// at launch after the fills, the drains once the GPU has run it.
using Issue = std::function<Status(coll::nccl::Pending*)>;
bool run(Call& c, std::vector<Side*> fills, std::vector<Side*> drains, size_t scratch,
         const Issue& issue, int* rc) {
  transport::Mover* mv = runtime()->mover(transport::Method::kDevice);
  auto s = std::make_shared<Schedule>();
  if (!mv) {
    *rc = raise(c.comm(), MPI_ERR_INTERN, "no GPU mover for an NCCL collective");
    return true;
  }
  if (scratch > 0) {
    auto sc = mv->scratch(scratch);
    if (!sc) {
      *rc = raise(c.comm(), sc.status());
      return true;
    }
    s->scratch.push_back(std::move(sc.value()));
  }
  char* base = scratch > 0 ? static_cast<char*>(s->scratch.back().dev) : nullptr;
  for (auto* list : {&fills, &drains})
    for (Side* d : *list)
      if (!d->direct && d->bytes > 0) d->at = base + d->off;
  std::vector<Side> in, out;
  for (Side* d : fills) in.push_back(*d);
  for (Side* d : drains) out.push_back(*d);
  for (const auto* list : {&in, &out})
    for (const Side& d : *list) s->types.push_back(d.type);
  auto pend = std::make_shared<coll::nccl::Pending>();
  auto err = std::make_shared<Status>();
  const MPI_Comm comm = c.comm();
  s->launch = [=]() {
    Status f;
    for (const Side& d : in)
      if (f.is_ok()) f = d.fill(*mv, comm);
    // Queued even where a fill failed: the peers' work waits for it.
    Status x = issue(pend.get());
    if (!f.is_ok()) *err = f;
    return x.is_ok() ? MPI_SUCCESS : raise(comm, x);
  };
  s->done = [=]() { return pend->finished(err.get()); };
  s->finish = [=]() {
    Status st = *err;
    for (const Side& d : out)
      if (st.is_ok()) st = d.drain(*mv, comm);
    return st.is_ok() ? MPI_SUCCESS : raise(comm, st);
  };
  LOOM_DEBUG(kMpi, "%s: NCCL, nonblocking", c.fn());
  *rc = start_schedule(comm, std::move(s), c.request());
  return true;
}

}  // namespace

bool reduction(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
               int* rc) {
  int size = 0;
  // The count, type, op and root are alike on every rank (MPI's rule).
  if (count <= 0 || !coll::nccl::reducible(t, op) || PMPI_Type_size(t, &size) != MPI_SUCCESS ||
      !gate(c, int64_t{count} * size))
    return false;
  const bool out_here = root < 0 || c.rank() == root;
  const bool in_place = s == MPI_IN_PLACE;
  Side in, out;
  size_t scratch = 0;
  bool ok = out_here ? side(r, count, t, false, &out, &scratch) : true;
  if (!(in_place && out_here)) ok = side(s, count, t, false, &in, &scratch) && ok;
  if (!ok) return false;  // a null buffer or the like: the MPI's own raises it
  std::vector<Side*> fills, drains;
  if (in_place && out_here) {
    fills.push_back(&out);  // the input is the output's bytes
  } else {
    fills.push_back(&in);
  }
  if (out_here) drains.push_back(&out);
  const MPI_Comm comm = c.comm();
  Side* pi = in_place && out_here ? &out : &in;
  Side* po = out_here ? &out : nullptr;
  return run(
      c, fills, drains, scratch,
      [=, cnt = static_cast<size_t>(count)](coll::nccl::Pending* p) {
        void* o = po ? po->at : nullptr;
        return root < 0 ? coll::nccl::allreduce(comm, pi->at, o, cnt, t, op, p)
                        : coll::nccl::reduce(comm, pi->at, o, cnt, t, op, root, p);
      },
      rc);
}

bool bcast(Call& c, void* buf, int count, MPI_Datatype t, int root, int* rc) {
  int size = 0;
  if (root < 0 || root >= c.size() || count <= 0 || t == MPI_DATATYPE_NULL ||
      PMPI_Type_size(t, &size) != MPI_SUCCESS || !gate(c, int64_t{count} * size))
    return false;
  Side b;
  size_t scratch = 0;
  if (!side(buf, count, t, false, &b, &scratch)) return false;
  const bool at_root = c.rank() == root;
  std::vector<Side*> fills, drains;
  (at_root ? fills : drains).push_back(&b);
  const MPI_Comm comm = c.comm();
  Side* pb = &b;
  return run(
      c, fills, drains, scratch,
      [=](coll::nccl::Pending* p) { return coll::nccl::bcast(comm, pb->at, pb->bytes, root, p); },
      rc);
}

bool allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
               MPI_Datatype rt, int* rc) {
  int size = 0;
  const int n = c.size();
  if (!gate_blocks(c, rcount, rt, &size)) return false;
  const bool in_place = s == MPI_IN_PLACE;
  Side in, out;
  size_t scratch = 0;
  bool ok = side(r, int64_t{rcount} * n, rt, false, &out, &scratch);
  if (!in_place) ok = side(s, sc, st, false, &in, &scratch) && ok;
  if (!ok) return false;
  const size_t each = static_cast<size_t>(rcount) * static_cast<size_t>(size);
  if (!in_place && in.bytes != each) return false;  // the MPI's own reports the mismatch
  std::vector<Side*> fills, drains{&out};
  // In place this rank's block already sits in the output: NCCL reads it
  // there (the whole output is loaded where it is not the user's memory).
  fills.push_back(in_place ? &out : &in);
  const MPI_Comm comm = c.comm();
  const int me = c.rank();
  Side* pi = in_place ? nullptr : &in;
  Side* po = &out;
  return run(
      c, fills, drains, scratch,
      [=](coll::nccl::Pending* p) {
        const char* from = pi ? pi->at : po->at + each * static_cast<size_t>(me);
        return coll::nccl::allgather(comm, from, po->at, each, p);
      },
      rc);
}

bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc) {
  int size = 0;
  const int n = c.size();
  if (!gate_blocks(c, rcount, rt, &size)) return false;
  const bool in_place = s == MPI_IN_PLACE;
  Side in, out;
  size_t scratch = 0;
  bool ok = side(r, int64_t{rcount} * n, rt, false, &out, &scratch);
  // In place the sends are a copy of the receive buffer, loaded first.
  ok = (in_place ? side(r, int64_t{rcount} * n, rt, true, &in, &scratch)
                 : side(s, int64_t{sc} * n, st, false, &in, &scratch)) &&
       ok;
  if (!ok || in.bytes != out.bytes) return false;
  const size_t each = out.bytes / static_cast<size_t>(n);
  const MPI_Comm comm = c.comm();
  Side* pi = &in;
  Side* po = &out;
  return run(
      c, {&in}, {&out}, scratch,
      [=](coll::nccl::Pending* p) {
        std::vector<coll::nccl::Xfer> sends, recvs;
        for (int q = 0; q < n; ++q) {
          const size_t at = each * static_cast<size_t>(q);
          sends.push_back({q, pi->at + at, each});
          recvs.push_back({q, po->at + at, each});
        }
        return coll::nccl::exchange(comm, sends, recvs, p);
      },
      rc);
}

}  // namespace loom::mpi::nccl_nb
