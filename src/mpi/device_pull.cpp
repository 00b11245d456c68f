// The receive side of the device method: a header a receive got becomes the
// message in the user's buffer (device_pull.hpp).
#include "mpi/device_pull.hpp"
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include "mpi/device_message.hpp"
#include "mpi/runtime.hpp"
#include "transport/message_wire.hpp"
#include "transport/shared_page.hpp"
#include "type/wire.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::mpi {

int settle(const Header& h, uint64_t capacity, MPI_Status& st) {
  const uint64_t got = std::min<uint64_t>(h.bytes, capacity);
  MPI_Status_set_elements_x(&st, MPI_BYTE, static_cast<MPI_Count>(got));
  st.MPI_ERROR = h.bytes > capacity ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
  return st.MPI_ERROR;
}

namespace {

int fail(Rendezvous& rv, const Header& h, const Status& s, MPI_Status& st) {
  LOOM_LOG(kError, kTransport, "device-method receive failed: %s", s.message().c_str());
  rv.ack(h);  // the sender's segment is free either way
  st.MPI_ERROR = MPI_ERR_OTHER;
  return MPI_ERR_OTHER;
}

}  // namespace

// A pipelined message: every chunk is received (the sender waits for them
// all, even past a truncation); each is copied up as it lands.
int pull_chunks(Rendezvous& rv, const Header& h, transport::Mover& mover,
                const transport::Message& m, void* user, MPI_Status& st) {
  const uint64_t got = std::min<uint64_t>(h.bytes, static_cast<uint64_t>(m.bytes));
  auto staged = mover.stage(static_cast<size_t>(h.bytes));
  std::vector<char> spare;
  void* host = nullptr;
  if (staged) {
    host = staged->host;
  } else {
    spare.resize(static_cast<size_t>(h.bytes));
    host = spare.data();
  }
  std::vector<MPI_Request> reqs = rv.post_chunk_recvs(h, host);
  Status s = staged ? Status::ok() : staged.status();
  if (s.is_ok())
    s = mover.unpack_chunked(
        m, staged.value(), static_cast<size_t>(got), static_cast<size_t>(h.offset),
        [&](size_t off, size_t) {
          MPI_Request& r = reqs[off / h.offset];
          return PMPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS
                     ? Status::ok()
                     : Status(Err::kMpi, "receiving a chunk");
        },
        user);
  PMPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  if (!s) {
    LOOM_LOG(kError, kTransport, "pipelined receive failed: %s", s.message().c_str());
    st.MPI_ERROR = MPI_ERR_OTHER;
    return MPI_ERR_OTHER;
  }
  return settle(h, static_cast<uint64_t>(m.bytes), st);
}

// The packed bytes of a kChannel message, fetched into a segment of this
// process (the channel writes memory of the segments' kind); then `use`.
template <class Use>
Status fetch_then(Rendezvous& rv, const Header& h, Use use) {
  auto seg = rv.memory()->acquire(static_cast<size_t>(h.bytes));
  if (!seg) {
    rv.ack(h);  // the sender's segment is free either way
    return seg.status();
  }
  Status s = rv.fetch(h, seg->ptr);
  if (s) s = use(static_cast<const void*>(seg->ptr));
  rv.memory()->release(seg.value());
  return s;
}

int channel_failed(const Status& s, MPI_Status& st) {
  LOOM_LOG(kError, kTransport, "device-method receive by the channel failed: %s",
           s.message().c_str());
  st.MPI_ERROR = MPI_ERR_OTHER;
  return MPI_ERR_OTHER;
}

// A kChannel message: a contiguous one that fits lands in the user's buffer
// as it is; others come into a segment and are unpacked from there.
int pull_channel(Rendezvous& rv, const Header& h, transport::Mover& mover,
                 const transport::Message& m, void* user, MPI_Status& st) {
  const uint64_t got = std::min<uint64_t>(h.bytes, static_cast<uint64_t>(m.bytes));
  int64_t base = 0;
  stats::Scope phase(stats::kPullWait);
  Status s = got == h.bytes && transport::contiguous_at(m, &base)
                 ? rv.fetch(h, static_cast<char*>(user) + base)
                 : fetch_then(rv, h, [&](const void* src) {
                     return mover.unpack_from_peer(m, src, static_cast<size_t>(got), user);
                   });
  if (!s) return channel_failed(s, st);
  return settle(h, static_cast<uint64_t>(m.bytes), st);
}

void pull_channel_many(Rendezvous& rv, std::vector<ChannelPull>& pulls) {
  stats::Scope phase(stats::kPullWait);
  std::vector<Rendezvous::Fetch> items;
  std::vector<transport::Segment> segs(pulls.size());
  std::vector<size_t> asked;  // index into pulls of each item
  for (size_t i = 0; i < pulls.size(); ++i) {
    ChannelPull& p = pulls[i];
    const uint64_t got = std::min<uint64_t>(p.h->bytes, static_cast<uint64_t>(p.m->bytes));
    int64_t base = 0;
    void* dst = nullptr;
    if (got == p.h->bytes && transport::contiguous_at(*p.m, &base)) {
      dst = static_cast<char*>(p.user) + base;
    } else if (auto seg = rv.memory()->acquire(static_cast<size_t>(p.h->bytes))) {
      segs[i] = seg.value();
      dst = segs[i].ptr;
    } else {
      rv.ack(*p.h);
      p.rc = channel_failed(seg.status(), *p.st);
      continue;
    }
    items.push_back({p.h, dst});
    asked.push_back(i);
  }
  std::vector<Status> got = rv.fetch_many(items);
  for (size_t k = 0; k < asked.size(); ++k) {
    ChannelPull& p = pulls[asked[k]];
    transport::Segment& seg = segs[asked[k]];
    Status s = got[k];
    if (s && seg.ptr) {
      const uint64_t n = std::min<uint64_t>(p.h->bytes, static_cast<uint64_t>(p.m->bytes));
      s = p.mover->unpack_from_peer(*p.m, seg.ptr, static_cast<size_t>(n), p.user);
    }
    if (seg.ptr) rv.memory()->release(seg);
    p.rc = s ? settle(*p.h, static_cast<uint64_t>(p.m->bytes), *p.st) : channel_failed(s, *p.st);
  }
}

int pull_into_device(Rendezvous& rv, const Header& h, transport::Mover& mover,
                     const transport::Message& m, void* user, MPI_Status& st) {
  if (h.kind == kChunks) return pull_chunks(rv, h, mover, m, user, st);
  if (h.kind == kChannel) return pull_channel(rv, h, mover, m, user, st);
  auto src = rv.open(h);
  if (!src) return fail(rv, h, src.status(), st);
  const uint64_t got = std::min<uint64_t>(h.bytes, static_cast<uint64_t>(m.bytes));
  const auto t0 = std::chrono::steady_clock::now();
  Status s;
  {
    stats::Scope phase(stats::kPullWait);
    if (src->layout)  // read out of the sender's layout
      s = mover.unpack_from_layout(m, *src->layout, src->ptr, static_cast<size_t>(got), user);
    else
      s = mover.unpack_from_peer(m, src->ptr, static_cast<size_t>(got), user);
  }
  LOOM_DEBUG(
      kTransport, "pull: %llu bytes in %.1f us", static_cast<unsigned long long>(got),
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  if (!s) return fail(rv, h, s, st);
  {
    stats::Scope phase(stats::kAck);
    rv.ack(h);
  }
  return settle(h, static_cast<uint64_t>(m.bytes), st);
}

int check_typed_recv(void* buf, int count, MPI_Datatype type, MPI_Comm comm, MPI_Status& st) {
  Runtime* rt = runtime();
  if (!rt || !rt->rv) return MPI_SUCCESS;
  MPI_Count n = 0;
  MPI_Get_elements_x(&st, MPI_BYTE, &n);
  int cancelled = 0;
  if (n < 0 || !rt->rv->may_be_header(static_cast<size_t>(n)) ||
      (MPI_Test_cancelled(&st, &cancelled), cancelled))
    return MPI_SUCCESS;
  // The header went through the receive's type: pack its first bytes back.
  int size = 0;
  PMPI_Type_size(type, &size);
  if (size <= 0) return MPI_SUCCESS;
  const int elems = static_cast<int>(std::min<int64_t>(count, (n + size - 1) / size));
  std::vector<char> raw(static_cast<size_t>(elems) * static_cast<size_t>(size));
  int pos = 0;
  if (PMPI_Pack(buf, elems, type, raw.data(), static_cast<int>(raw.size()), &pos, comm) !=
      MPI_SUCCESS)
    return MPI_SUCCESS;
  Header h;
  if (raw.size() < static_cast<size_t>(n) ||
      !rt->rv->is_header(raw.data(), static_cast<size_t>(n), &h))
    return MPI_SUCCESS;
  return pull_into_host(*rt->rv, h, buf, count, type, comm, st);
}

bool host_recv_as_bytes(const void* buf, int count, MPI_Datatype type, size_t* bytes) {
#if defined(OPEN_MPI) && OPEN_MPI
  (void)buf, (void)count, (void)type, (void)bytes;
  return false;
#else
  int size = 0;
  if (count <= 0 || PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0 ||
      on_device(buf, count, type))
    return false;
  const int64_t n = int64_t{count} * size;
  if (n >= kHeaderBytes && kHeaderBytes % size == 0) return false;
  const int64_t room = std::max<int64_t>(n, kHeaderBytes);
  if (room > INT32_MAX) return false;
  *bytes = static_cast<size_t>(room);
  return true;
#endif
}

int finish_bytes_recv(const void* scratch, void* buf, int count, MPI_Datatype type, MPI_Comm comm,
                      MPI_Status& st) {
  MPI_Count n = 0;
  MPI_Get_elements_x(&st, MPI_BYTE, &n);
  const size_t received = static_cast<size_t>(std::max<MPI_Count>(n, 0));
  Runtime* rt = runtime();
  Header h;
  if (rt && rt->rv && rt->rv->is_header(scratch, received, &h))
    return pull_into_host(*rt->rv, h, buf, count, type, comm, st);
  int size = 0;
  PMPI_Type_size(type, &size);
  const size_t capacity = static_cast<size_t>(count) * static_cast<size_t>(std::max(size, 0));
  const size_t got = std::min(received, capacity);
  unpack_typed_host(scratch, got, buf, count, type, comm);
  MPI_Status_set_elements_x(&st, MPI_BYTE, static_cast<MPI_Count>(got));
  st.MPI_ERROR = received > capacity ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
  return st.MPI_ERROR;
}

void unpack_typed_host(const void* packed, size_t n, void* buf, int count, MPI_Datatype type,
                       MPI_Comm comm) {
  DevicePlan p;
  if (plan_device(count, type, comm, p) == MPI_SUCCESS && !p.span()) {
    Status s = transport::host_unpack_received(p.msg, packed, n, buf);
    if (s.is_ok()) return;
  }
  int size = 0;
  PMPI_Type_size(type, &size);
  if (size <= 0) return;
  int pos = 0;  // whole elements only: the MPI cannot unpack part of one
  PMPI_Unpack(packed, static_cast<int>(n), &pos, buf,
              static_cast<int>(n / static_cast<size_t>(size)), type, comm);
}

int pull_into_host(Rendezvous& rv, const Header& h, void* buf, int count, MPI_Datatype type,
                   MPI_Comm comm, MPI_Status& st) {
  int size = 0;
  PMPI_Type_size(type, &size);
  const uint64_t capacity = static_cast<uint64_t>(count) * static_cast<uint64_t>(std::max(size, 0));
  const uint64_t got = std::min<uint64_t>(h.bytes, capacity);
  if (h.kind == kChunks) {  // every chunk lands, then the part that fits is unpacked
    std::vector<char> packed(static_cast<size_t>(h.bytes));
    std::vector<MPI_Request> reqs = rv.post_chunk_recvs(h, packed.data());
    PMPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
    unpack_typed_host(packed.data(), static_cast<size_t>(got), buf, count, type, comm);
    return settle(h, capacity, st);
  }
  // Down to host memory, then unpacked by the host engine (or by the MPI for
  // types Loom cannot read).
  Runtime* rt = runtime();
  transport::Mover* copier = rt ? rt->mover_for(static_cast<size_t>(got)) : nullptr;
  std::vector<char> packed(static_cast<size_t>(got));
  if (h.kind == kChannel) {
    Status s = fetch_then(rv, h, [&](const void* src) {
      return copier ? copier->copy_to_host(packed.data(), src, packed.size())
                    : Status(Err::kUnsupported, "no mover");
    });
    if (!s) return channel_failed(s, st);
    unpack_typed_host(packed.data(), packed.size(), buf, count, type, comm);
    return settle(h, capacity, st);
  }
  auto src = rv.open(h);
  if (!src) return fail(rv, h, src.status(), st);
  Status s = copier ? Status::ok() : Status(Err::kUnsupported, "no mover");
  if (s && src->layout) {  // packed out of the sender's layout first
    auto staged = copier->pack(*src->layout, src->ptr);
    if (!staged) s = staged.status();
    if (s) std::memcpy(packed.data(), staged->host, packed.size());
  } else if (s) {
    s = copier->copy_to_host(packed.data(), src->ptr, packed.size());
  }
  if (!s) return fail(rv, h, s, st);
  rv.ack(h);
  unpack_typed_host(packed.data(), packed.size(), buf, count, type, comm);
  return settle(h, capacity, st);
}

}  // namespace loom::mpi
