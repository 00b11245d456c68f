// Shared by the interposed calls that take device buffers: checking the
// arguments, choosing the mover, and the (count, type) in which a host MPI
// carries packed bytes.
#pragma once

#include <mpi.h>

#include "mpi/runtime.hpp"
#include "mpi/type_registry.hpp"
#include "transport/memtype.hpp"
#include "transport/mover.hpp"

namespace loom::mpi {

// True when Loom is active and buf is device memory: the call is Loom's.
// For buffers of packed bytes (no datatype between pointer and data).
inline bool on_device(const void* buf) {
  return runtime() && transport::memkind(buf) == transport::MemKind::kDevice;
}

// The same for a datatype buffer: the data starts at buf + true lb, which
// may lie outside the allocation buf points into (a type with a positive
// lower bound, or MPI_BOTTOM with absolute addresses), so the first data
// byte is what is classified when buf itself is not device memory.
bool on_device(const void* buf, int count, MPI_Datatype type);
// The bytes [*lo, *hi) from a buffer's origin that `count` (> 0) elements of
// `type` span, gaps included (the MPI's extents); false for an invalid type.
bool data_span(int64_t count, MPI_Datatype type, int64_t* lo, int64_t* hi);

// A device message resolved: either a type Loom reads (msg) or, for types it
// cannot read or was never shown, the whole span of the data (span_*), which
// goes through the host and is handled by the MPI with the original type.
struct DevicePlan {
  TypeRegistry::Entry type;
  transport::Message msg;
  transport::Mover* mover = nullptr;
  transport::Method method = transport::Method::kStaged;  // for msg; spans go staged
  int64_t span_lo = 0;
  int64_t span_bytes = 0;
  bool span() const { return !type; }
  // A type Loom reads, and no data: a zero count or a type of size 0.
  bool empty() const { return !span() && msg.bytes == 0; }
};

// The message of `count` elements of a type Loom reads; false when its size
// overflows 64 bits.
bool fill_message(const CommittedType& t, int count, transport::Message* m);

// Checks count, type and comm (errors through comm's handler) and resolves,
// choosing the method: `peer` is the destination of a send (the device
// method is possible to it), or MPI_PROC_NULL (receives, local packs).
int plan_device(int count, MPI_Datatype type, MPI_Comm comm, DevicePlan& p,
                int peer = MPI_PROC_NULL);

// Packed bytes as the host MPI takes them: MPI_BYTE up to INT_MAX bytes,
// beyond that a committed struct of 1 MiB chunks (free it with release()).
struct ByteArg {
  int count = 0;
  MPI_Datatype type = MPI_BYTE;
  int make(size_t bytes);
  void release();
};

}  // namespace loom::mpi
