// MPI_Pack / MPI_Unpack family done by Loom's engines.
#include <cstdint>

#include "loom/loom.h"
#include "mpi/errors.hpp"
#include "mpi/runtime.hpp"
#include "pack/host_engine.hpp"
#include "type/canonical.hpp"

namespace loom::mpi {
namespace {

// What one pack or unpack call moves. The view points into the registry
// entry's layout (held here, so a concurrent MPI_Type_free cannot pull it
// away) or, for the rare type needing more dims than a view holds, into
// `owned`.
struct Prepared {
  TypeRegistry::Entry entry;
  pack::Layout owned;
  pack::LayoutView view;
  int64_t bytes = 0;
  bool handback = false;  // the MPI does the work (Loom off, or a type it cannot read)
};

int prepare(MPI_Datatype type, int count, const int* position, MPI_Comm comm, Prepared& p) {
  Runtime* rt = runtime();
  if (!rt) {
    p.handback = true;
    return MPI_SUCCESS;
  }
  if (comm == MPI_COMM_NULL) return raise(comm, MPI_ERR_COMM, "null communicator");
  if (count < 0) return raise(comm, MPI_ERR_COUNT, "negative count");
  if (!position) return raise(comm, MPI_ERR_ARG, "null position");
  if (*position < 0) return raise(comm, MPI_ERR_ARG, "negative position");
  if (type == MPI_DATATYPE_NULL) return raise(comm, MPI_ERR_TYPE, "MPI_DATATYPE_NULL");
  auto e = rt->types.lookup(type);
  if (!e) {
    // Types Loom cannot read, and handles it never saw committed (the MPI
    // raises the error for an uncommitted type itself), go to the MPI.
    p.handback = true;
    return MPI_SUCCESS;
  }
  p.entry = std::move(e.value());
  const type::TypeInfo& info = p.entry->info;
  if (!type::checked_mul(count, info.size, &p.bytes))
    return raise(comm, MPI_ERR_COUNT, "packed size overflows");
  auto v = pack::repeat_view(p.entry->layout, count, info.extent);
  if (v) {
    p.view = v.value();
    return MPI_SUCCESS;
  }
  if (v.status().code() != Err::kUnsupported) return raise(comm, v.status());
  auto l = pack::make_layout(type::repeat(info.form, count, info.extent));
  if (!l) return raise(comm, l.status());
  p.owned = std::move(l.value());
  p.view = p.owned.view();
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace loom::mpi

extern "C" int loom_pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf,
                         int outsize, int* position, MPI_Comm comm) {
  using namespace loom;
  mpi::Prepared p;
  int rc = mpi::prepare(type, incount, position, comm, p);
  if (rc != MPI_SUCCESS) return rc;
  const int64_t bytes = p.bytes;
  if (p.handback) return PMPI_Pack(inbuf, incount, type, outbuf, outsize, position, comm);
  if (outsize < 0) return mpi::raise(comm, MPI_ERR_ARG, "negative output size");
  if (bytes > static_cast<int64_t>(outsize) - *position)
    return mpi::raise(comm, MPI_ERR_TRUNCATE, "MPI_Pack: output buffer too small");
  if (bytes > 0 && !outbuf) return mpi::raise(comm, MPI_ERR_BUFFER, "MPI_Pack: null output buffer");
  // inbuf may be MPI_BOTTOM (null) for types built from absolute addresses.
  pack::host_pack(p.view, inbuf, static_cast<char*>(outbuf) + *position);
  *position += static_cast<int>(bytes);
  return MPI_SUCCESS;
}

extern "C" int loom_unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount,
                           MPI_Datatype type, MPI_Comm comm) {
  using namespace loom;
  mpi::Prepared p;
  int rc = mpi::prepare(type, outcount, position, comm, p);
  if (rc != MPI_SUCCESS) return rc;
  const int64_t bytes = p.bytes;
  if (p.handback) return PMPI_Unpack(inbuf, insize, position, outbuf, outcount, type, comm);
  if (insize < 0) return mpi::raise(comm, MPI_ERR_ARG, "negative input size");
  if (bytes > static_cast<int64_t>(insize) - *position)
    return mpi::raise(comm, MPI_ERR_TRUNCATE, "MPI_Unpack: input shorter than the data");
  if (bytes > 0 && !inbuf) return mpi::raise(comm, MPI_ERR_BUFFER, "MPI_Unpack: null input buffer");
  pack::host_unpack(p.view, static_cast<const char*>(inbuf) + *position, outbuf);
  *position += static_cast<int>(bytes);
  return MPI_SUCCESS;
}
