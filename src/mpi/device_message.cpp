#include "mpi/device_message.hpp"

#include <algorithm>
#include <climits>

#include "mpi/errors.hpp"
#include "mpi/next.hpp"
#include "type/from_mpi.hpp"
#include "type/ir.hpp"
#include "util/log.hpp"

namespace loom::mpi {

bool on_device(const void* buf, int count, MPI_Datatype type) {
  Runtime* rt = runtime();
  if (!rt) return false;
  if (transport::memkind(buf) == transport::MemKind::kDevice) return true;
  if (count <= 0 || type == MPI_DATATYPE_NULL) return false;
  // A predefined type's data begins at buf (true lower bound 0, extent > 0):
  // no registry lookup, which cost about a quarter of a host call's time.
  if (type::is_predefined(type)) return false;
  int64_t first = 0;
  auto e = rt->types.lookup(type);
  if (e) {
    if (!e.value()->info.form) return false;  // no data
    first = e.value()->info.true_lb;
    if (e.value()->info.extent < 0)
      first += static_cast<int64_t>(count - 1) * e.value()->info.extent;
  } else {
    MPI_Count tlb = 0, text = 0;
    if (MPI_Type_get_true_extent_x(type, &tlb, &text) != MPI_SUCCESS) return false;
    first = tlb;
  }
  if (first == 0) return false;
  const void* data = static_cast<const char*>(buf) + first;
  return transport::memkind(data) == transport::MemKind::kDevice;
}

bool data_span(int64_t count, MPI_Datatype type, int64_t* lo, int64_t* hi) {
  MPI_Count tlb = 0, text = 0, lb = 0, ext = 0;
  if (PMPI_Type_get_true_extent_x(type, &tlb, &text) != MPI_SUCCESS ||
      PMPI_Type_get_extent_x(type, &lb, &ext) != MPI_SUCCESS)
    return false;
  const int64_t shift = (count - 1) * ext;
  *lo = tlb + std::min<int64_t>(0, shift);
  *hi = tlb + text + std::max<int64_t>(0, shift);
  return true;
}

bool fill_message(const CommittedType& t, int count, transport::Message* m) {
  m->form = t.info.form;
  m->one = &t.layout;
  m->hold = t.weak_from_this().lock();
  m->count = count;
  m->extent = t.info.extent;
  return type::checked_mul(count, t.info.size, &m->bytes);
}

int plan_device(int count, MPI_Datatype type, MPI_Comm comm, DevicePlan& p, int peer) {
  Runtime* rt = runtime();
  if (comm == MPI_COMM_NULL) return raise(comm, MPI_ERR_COMM, "null communicator");
  if (count < 0) return raise(comm, MPI_ERR_COUNT, "negative count");
  if (type == MPI_DATATYPE_NULL) return raise(comm, MPI_ERR_TYPE, "MPI_DATATYPE_NULL");
  // Finished background sends return their staging now, not only at the
  // next Wait/Test: a program of blocking calls would otherwise keep it.
  // A send leaves the packs deferred before it for its own to join.
  if (rt->rv) rt->rv->progress(/*flush=*/peer == MPI_PROC_NULL, /*throttled=*/true);
  auto e = rt->types.lookup(type);
  if (e) {
    p.type = std::move(e.value());
    if (!fill_message(*p.type, count, &p.msg))
      return raise(comm, MPI_ERR_COUNT, "message size overflows");
    // Without the device method's node map every peer counts as on the node.
    // The device method reaches peers of the node, and channel peers.
    bool on_node = true, reached = peer >= 0;
    if (rt->rv && peer >= 0) {
      on_node = rt->rv->peer_on_node(comm, peer) >= 0;
      reached = on_node || rt->rv->channel_to(rt->rv->world_rank(comm, peer));
    }
    p.method = rt->choose(p.msg, on_node, reached);
    p.mover = rt->mover(p.method);
  } else {
    // The MPI knows this type (or will raise its error): move the whole span
    // of the data, read from the MPI (valid for uncommitted types too).
    MPI_Count tlb = 0, text = 0, lb = 0, ext = 0, size = 0;
    MPI_Type_get_true_extent_x(type, &tlb, &text);
    MPI_Type_get_extent_x(type, &lb, &ext);
    MPI_Type_size_x(type, &size);
    if (count > 0 && size > 0) {
      int64_t shift = static_cast<int64_t>(count - 1) * ext;
      p.span_lo = tlb + std::min<int64_t>(0, shift);
      p.span_bytes = tlb + text + std::max<int64_t>(0, shift) - p.span_lo;
    }
    p.mover = rt->mover_for(static_cast<size_t>(p.span_bytes));
    LOOM_INFO(kMpi, "device message with a type Loom does not know: %lld bytes through the host",
              (long long)p.span_bytes);
  }
  if (!p.mover) return raise(comm, MPI_ERR_BUFFER, "device buffer, but no GPU mover is available");
  return MPI_SUCCESS;
}

int ByteArg::make(size_t bytes) {
  if (bytes <= static_cast<size_t>(INT_MAX)) {
    count = static_cast<int>(bytes);
    type = MPI_BYTE;
    return MPI_SUCCESS;
  }
  const size_t chunk = size_t{1} << 20;
  MPI_Datatype mib;
  LOOM_NEXT(MPI_Type_contiguous)(static_cast<int>(chunk), MPI_BYTE, &mib);
  int blens[2] = {static_cast<int>(bytes / chunk), static_cast<int>(bytes % chunk)};
  MPI_Aint disps[2] = {0, static_cast<MPI_Aint>(bytes / chunk * chunk)};
  MPI_Datatype types[2] = {mib, MPI_BYTE};
  int rc = LOOM_NEXT(MPI_Type_create_struct)(2, blens, disps, types, &type);
  LOOM_NEXT(MPI_Type_free)(&mib);
  if (rc == MPI_SUCCESS) rc = LOOM_NEXT(MPI_Type_commit)(&type);
  count = 1;
  return rc;
}

void ByteArg::release() {
  if (type != MPI_BYTE) LOOM_NEXT(MPI_Type_free)(&type);
  type = MPI_BYTE;
}

}  // namespace loom::mpi
