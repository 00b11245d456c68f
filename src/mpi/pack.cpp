// MPI_Pack / MPI_Unpack family done by Loom's engines.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "loom/loom.h"
#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/next.hpp"
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
  if (p.handback) return LOOM_NEXT(MPI_Pack)(inbuf, incount, type, outbuf, outsize, position, comm);
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
  if (p.handback)
    return LOOM_NEXT(MPI_Unpack)(inbuf, insize, position, outbuf, outcount, type, comm);
  if (insize < 0) return mpi::raise(comm, MPI_ERR_ARG, "negative input size");
  if (bytes > static_cast<int64_t>(insize) - *position)
    return mpi::raise(comm, MPI_ERR_TRUNCATE, "MPI_Unpack: input shorter than the data");
  if (bytes > 0 && !inbuf) return mpi::raise(comm, MPI_ERR_BUFFER, "MPI_Unpack: null input buffer");
  pack::host_unpack(p.view, static_cast<const char*>(inbuf) + *position, outbuf);
  *position += static_cast<int>(bytes);
  return MPI_SUCCESS;
}

// The interposed MPI_Pack / MPI_Unpack: host buffers go to the MPI as they
// are. With both sides on the device, types Loom reads are packed or
// unpacked by one kernel straight between them; with one side on the
// device, the bytes pass through host staging (the one-shot kernel writes
// mapped pinned memory) and one copy. Types Loom cannot read go through the
// host whole, handled by the MPI.
namespace loom::mpi {
namespace {

int check_room(MPI_Comm comm, const int* position, int size, int64_t bytes) {
  if (!position || *position < 0 || size < 0)
    return raise(comm, MPI_ERR_ARG, "bad position or size");
  if (bytes > static_cast<int64_t>(size) - *position)
    return raise(comm, MPI_ERR_TRUNCATE, "packed data does not fit");
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace loom::mpi

extern "C" {

int MPI_Pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize,
             int* position, MPI_Comm comm) {
  using namespace loom::mpi;
  const bool dev_in = on_device(inbuf, incount, type), dev_out = on_device(outbuf);
  if (!dev_in && !dev_out)
    return LOOM_NEXT(MPI_Pack)(inbuf, incount, type, outbuf, outsize, position, comm);
  DevicePlan p;
  int rc = plan_device(incount, type, comm, p);
  if (rc != MPI_SUCCESS) return rc;
  if (!p.span() && (rc = check_room(comm, position, outsize, p.msg.bytes)) != MPI_SUCCESS)
    return rc;
  if (p.empty()) return check_room(comm, position, outsize, 0);  // nothing to move
  if (dev_in && dev_out && !p.span()) {
    // Device to device: one kernel writes the packed bytes where they go.
    if (p.msg.bytes > 0) {
      loom::Status c = p.mover->pack_to(p.msg, inbuf, static_cast<char*>(outbuf) + *position);
      if (!c) return raise(comm, c);
    }
    *position += static_cast<int>(p.msg.bytes);
    return MPI_SUCCESS;
  }
  // The packed bytes, in host memory.
  loom::transport::Staged bytes;
  if (dev_in && !p.span()) {
    auto s = p.mover->pack(p.msg, inbuf);
    if (!s) return raise(comm, s.status());
    bytes = std::move(s.value());
  } else {
    // The MPI packs from host memory: the span comes down first if needed.
    int cap = 0;
    LOOM_NEXT(MPI_Pack_size)(incount, type, comm, &cap);
    auto span = p.mover->stage(static_cast<size_t>(p.span_bytes));
    auto out = p.mover->stage(static_cast<size_t>(cap));
    if (!span || !out) return raise(comm, MPI_ERR_NO_MEM, "MPI_Pack staging");
    const void* from = inbuf;
    if (dev_in) {
      loom::Status c =
          p.mover->copy_to_host(span->host, static_cast<const char*>(inbuf) + p.span_lo,
                                static_cast<size_t>(p.span_bytes));
      if (!c) return raise(comm, c);
      from = static_cast<char*>(span->host) - p.span_lo;
    }
    int pos = 0;
    char none = 0;  // the MPI refuses a null output even for no bytes
    rc = LOOM_NEXT(MPI_Pack)(from, incount, type, cap ? out->host : &none, cap, &pos, comm);
    if (rc != MPI_SUCCESS) return rc;
    bytes = std::move(out.value());
    bytes.bytes = static_cast<size_t>(pos);
  }
  if ((rc = check_room(comm, position, outsize, static_cast<int64_t>(bytes.bytes))) != MPI_SUCCESS)
    return rc;
  char* dst = static_cast<char*>(outbuf) + *position;
  if (dev_out) {
    loom::Status c = p.mover->copy_from_host(dst, bytes.host, bytes.bytes);
    if (!c) return raise(comm, c);
  } else if (bytes.bytes > 0) {
    std::memcpy(dst, bytes.host, bytes.bytes);
  }
  *position += static_cast<int>(bytes.bytes);
  return MPI_SUCCESS;
}

int MPI_Unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount,
               MPI_Datatype type, MPI_Comm comm) {
  using namespace loom::mpi;
  const bool dev_in = on_device(inbuf), dev_out = on_device(outbuf, outcount, type);
  if (!dev_in && !dev_out)
    return LOOM_NEXT(MPI_Unpack)(inbuf, insize, position, outbuf, outcount, type, comm);
  DevicePlan p;
  int rc = plan_device(outcount, type, comm, p);
  if (rc != MPI_SUCCESS) return rc;
  if (!position || *position < 0 || insize < 0)
    return raise(comm, MPI_ERR_ARG, "bad position or size");
  // Too little input is an error on every path (MPICH's own unpack would
  // read what there is).
  if (!p.span() && (rc = check_room(comm, position, insize, p.msg.bytes)) != MPI_SUCCESS) return rc;
  if (p.empty()) return MPI_SUCCESS;  // nothing to move
  const char* src = static_cast<const char*>(inbuf) + *position;
  if (dev_out && !p.span()) {
    if (p.msg.bytes > 0) {
      const size_t n = static_cast<size_t>(p.msg.bytes);
      loom::Status u;
      if (dev_in) {
        // Device to device: one kernel reads the packed bytes where they lie.
        u = p.mover->unpack_from(p.msg, src, n, outbuf);
      } else {
        // Only this call's bytes go up (the input may hold many more).
        auto in = p.mover->stage(n);
        if (!in) return raise(comm, in.status());
        std::memcpy(in->host, src, n);
        u = p.mover->unpack(p.msg, in.value(), n, outbuf);
      }
      if (!u) return raise(comm, u);
    }
    *position += static_cast<int>(p.msg.bytes);
    return MPI_SUCCESS;
  }
  // The packed input, in host memory.
  const size_t avail = static_cast<size_t>(insize - std::min(insize, *position));
  auto in = p.mover->stage(avail);
  if (!in) return raise(comm, in.status());
  if (avail > 0) {
    loom::Status c = dev_in ? p.mover->copy_to_host(in->host, src, avail)
                            : (std::memcpy(in->host, src, avail), loom::Status::ok());
    if (!c) return raise(comm, c);
  }
  // The MPI unpacks into host memory: for a device output, into its span.
  auto span = p.mover->stage(static_cast<size_t>(p.span_bytes));
  if (!span) return raise(comm, span.status());
  char none = 0;  // the MPI refuses null buffers even for no bytes
  void* to = outbuf;
  if (dev_out && p.span_bytes == 0) {
    to = &none;
  } else if (dev_out) {
    loom::Status c = p.mover->copy_to_host(span->host, static_cast<char*>(outbuf) + p.span_lo,
                                           static_cast<size_t>(p.span_bytes));
    if (!c) return raise(comm, c);
    to = static_cast<char*>(span->host) - p.span_lo;
  }
  int pos = 0;
  rc = LOOM_NEXT(MPI_Unpack)(avail ? in->host : &none, static_cast<int>(avail), &pos, to, outcount,
                             type, comm);
  if (rc != MPI_SUCCESS) return rc;
  if (dev_out) {
    loom::Status c = p.mover->copy_from_host(static_cast<char*>(outbuf) + p.span_lo, span->host,
                                             static_cast<size_t>(p.span_bytes));
    if (!c) return raise(comm, c);
  }
  *position += pos;
  return MPI_SUCCESS;
}

}  // extern "C"
