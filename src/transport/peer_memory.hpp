// Memory one process lends to another process of the same node, named by a
// handle small enough to travel in an MPI message: CUDA IPC for device
// memory, POSIX shared memory in the host test mode. The device method packs
// a message into a lent segment and the receiver unpacks straight out of it
// (over NVLink, or within one GPU), so the packed bytes never touch the host.
//
// Segments come from size-class free lists and are freed only at shutdown:
// a peer keeps every segment it opened mapped (mapping costs tens of
// microseconds), so a segment's memory must not change hands while it lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.hpp"

namespace loom::transport {

struct PeerHandle {
  uint64_t size = 0;             // bytes of the segment
  unsigned char bytes[64] = {};  // cudaIpcMemHandle_t, or a shared-memory name
};

struct Segment {
  void* ptr = nullptr;  // local address (device memory, or host in test mode)
  size_t size = 0;
  PeerHandle handle;
};

// A caller's own buffer lent without a copy (the zero-copy device method):
// `handle` names the allocation that holds the bytes, `offset` where they
// start in it. In the host test mode a process cannot lend its heap, so the
// bytes are copied into `copy`, a segment released when the peer is done.
struct Exported {
  PeerHandle handle;
  uint64_t offset = 0;
  uint64_t base = 0;  // the lender's address of the allocation (0 for a copy)
  Segment copy;
};

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual const char* name() const = 0;

  // A segment of at least `bytes`, lent until release().
  Result<Segment> acquire(size_t bytes);
  void release(const Segment& s);
  // Lends `bytes` at p, which the caller keeps unchanged until the peer is
  // done; kUnsupported where the memory cannot be lent (the caller then
  // packs into a segment), or with `whole_pages` where the allocation does
  // not fill whole 2 MiB pages. Peers map it with open_user(), which drops
  // mappings of freed memory that get in the way.
  virtual Result<Exported> export_user(const void* p, size_t bytes, bool whole_pages = false);
  // The local address of a peer's segment or lent allocation: mapped on
  // first use, then cached. `lender` (the peer's world rank, or -1): where
  // the driver finds a mapping of memory that peer freed in the way
  // ("already mapped"), its idle open_user() mappings are dropped and the
  // mapping is tried again.
  // `device`, when given: the GPU the segment lies on (-1: not a GPU's),
  // asked of the driver once, when it is mapped.
  Result<const void*> open(const PeerHandle& h, int lender = -1, int* device = nullptr);
  // A peer's allocation lent with export_user(), which covers [base, base +
  // h.size) in the lender (base 0: not known): mapped on first use and
  // cached, in use until done_user(). The lender may free it between uses;
  // the next allocation it lends over that range finds this mapping in the
  // way, and it is dropped then (as are any of the lender's idle ones where
  // the driver still refuses).
  Result<void*> open_user(const PeerHandle& h, int lender, uint64_t base);
  void done_user(const PeerHandle& h);
  // At shutdown, once no peer reads our segments and we read none of theirs.
  void unmap_all();
  void free_all();

  size_t bytes_in_use() const;
  // Smallest segment: messages below it are not worth the handshake anyway.
  static constexpr size_t kMinSegment = size_t{64} << 10;

 protected:
  virtual Result<Segment> allocate(size_t bytes) = 0;
  virtual void deallocate(const Segment& s) = 0;
  virtual Result<void*> map(const PeerHandle& h) = 0;
  virtual void unmap(void* p, const PeerHandle& h) = 0;
  // The GPU a mapping lies on, or -1.
  virtual int device_of(const void*) { return -1; }

 private:
  mutable std::mutex mu_;
  std::map<size_t, std::vector<Segment>> free_;  // by size class
  std::vector<Segment> all_;
  struct Opened {
    void* ptr = nullptr;
    int device = -1;  // device_of(ptr)
  };
  std::map<std::string, Opened, std::less<>> opened_;  // by handle bytes
  struct UserMap {
    void* ptr = nullptr;
    int lender = -1;
    uint64_t base = 0, size = 0;
    int uses = 0;
    PeerHandle handle;
  };
  std::map<std::string, UserMap, std::less<>> users_;  // open_user()'s, by handle bytes
  // Unmaps `lender`'s idle user mappings (those overlapping [base, base +
  // size), or all with size 0); how many. Under mu_.
  int drop_idle(int lender, uint64_t base, uint64_t size);
  size_t in_use_ = 0;
};

// POSIX shared memory (host test mode): names carry the job's nonce and the
// owner's rank, so concurrent jobs on one node do not collide.
std::unique_ptr<PeerMemory> make_shm_peer_memory(uint64_t nonce, int rank);
// CUDA IPC on the current device; needs a CUDA build and a GPU.
Result<std::unique_ptr<PeerMemory>> make_ipc_peer_memory();

}  // namespace loom::transport
