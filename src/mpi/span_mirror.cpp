#include "mpi/span_mirror.hpp"

#include <algorithm>

#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/runtime.hpp"

namespace loom::mpi {

void* SpanMirror::host() const {
  if (!set) return user;
  return static_cast<char*>(set->entries[0].staged.host) - lo;
}

int mirror_span(void* user, int count, MPI_Datatype type, MPI_Comm comm, bool in, bool out,
                bool down, SpanMirror* m) {
  *m = SpanMirror{};
  m->user = user;
  m->count = count;
  m->type = type;
  if (count <= 0 || type == MPI_DATATYPE_NULL) return MPI_SUCCESS;  // the MPI judges these
  MPI_Count size = 0;
  int64_t lo = 0, hi = 0;
  if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS || !data_span(count, type, &lo, &hi))
    return raise(comm, MPI_ERR_TYPE, "invalid datatype");
  if (size == 0 || hi <= lo) return MPI_SUCCESS;
  const auto bytes = static_cast<size_t>(hi - lo);
  Runtime* rt = runtime();
  transport::Mover* mover = rt ? rt->mover_for(bytes) : nullptr;
  if (!mover) return raise(comm, MPI_ERR_BUFFER, "device buffer, but no GPU mover is available");
  auto s = mover->stage(bytes);
  if (!s) return raise(comm, s.status());
  MirrorSet::Entry e;
  e.user = static_cast<char*>(user) + lo;
  e.hi = static_cast<int64_t>(bytes);
  e.in = in;
  e.out = out;
  e.staged = std::move(s.value());
  e.mover = mover;
  m->lo = lo;
  m->set = std::make_shared<MirrorSet>();
  m->set->entries.push_back(std::move(e));
  if (down) {
    if (Status c = m->set->down(); !c) return raise(comm, c);
  }
  return MPI_SUCCESS;
}

PendingOp span_recv_op(const SpanMirror& m, MPI_Comm comm) {
  PendingOp op;
  op.kind = PendingOp::Kind::kSpanRecv;
  op.user = m.user;
  op.count = m.count;
  keep_type(op, m.type);
  op.comm = comm;
  op.span_lo = m.lo;
  if (m.set) {
    op.staged = m.set->entries[0].staged;
    op.mover = m.set->entries[0].mover;
  }
  return op;
}

}  // namespace loom::mpi
