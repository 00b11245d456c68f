// Movers: each takes a message's bytes between a user buffer and a
// host-visible staging buffer, which is what the host MPI sends and
// receives, so an MPI that cannot read GPU memory never sees a device
// pointer. One mover per method, behind one small interface (NCCL's
// transport tables, in C++):
//   one-shot: the pack kernel writes straight into mapped pinned host memory;
//   staged:   pack into device scratch, then one copy to pinned host memory;
//   host:     the host engine (test mode, and buffers Loom treats as host).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "pack/layout.hpp"
#include "pack/proxy_queue.hpp"
#include "type/ir.hpp"
#include "util/status.hpp"

namespace loom::transport {

// What moves: `count` elements, `extent` apart, of a type whose canonical
// form and one-element layout are given (both owned by the caller's
// registry entry, which outlives the message).
struct Message {
  type::NodePtr form;
  const pack::Layout* one = nullptr;
  int64_t count = 0;
  int64_t extent = 0;
  int64_t bytes = 0;  // packed size: count * type size
  // Keeps `one` alive (a deferred pack may run after the user freed the type).
  std::shared_ptr<const void> hold;
};

struct Staged {
  void* host = nullptr;  // what the host MPI reads or writes
  void* dev = nullptr;   // the same bytes as kernels address them, where mapped
  size_t bytes = 0;
  std::shared_ptr<void> hold;  // keeps the buffer until the last copy is gone
};

enum class Method { kHost, kOneShot, kStaged, kDevice };
const char* method_name(Method m);

class Mover {
 public:
  virtual ~Mover() = default;
  virtual Method method() const = 0;
  // Packs the message from `user` into new staging; done when it returns.
  virtual Result<Staged> pack(const Message& m, const void* user) = 0;
  // Staging to receive up to `bytes` into.
  virtual Result<Staged> stage(size_t bytes) = 0;
  // Memory of the mover's engine (device scratch on a GPU; host memory for
  // the host engine), at `dev`: what pack_to writes and unpack_from reads,
  // and what an MPI that moves device memory is handed in their place.
  virtual Result<Staged> scratch(size_t bytes) {
    auto s = stage(bytes);
    if (s) s->dev = s->host;
    return s;
  }
  // Unpacks the first `received` bytes of `s` into `user`: whole elements,
  // then the leading bytes of a partial one when the sender sent less.
  virtual Status unpack(const Message& m, const Staged& s, size_t received, void* user) = 0;
  // The device method: packs into, or unpacks out of, memory the mover's
  // engine addresses directly (a peer's segment mapped into this process),
  // with no staging between. Done when they return.
  virtual Status pack_to(const Message& m, const void* user, void* dst) = 0;
  virtual Status unpack_from(const Message& m, const void* src, size_t received, void* user) = 0;
  // The device method without waiting for the GPU: enqueues the pack of m
  // from `user` into `dst` (as pack_to), then a write of `value` into the
  // host word `*word` once the pack is done (transport/ready_flags.hpp), and
  // returns. `user` must stay unchanged until the word says so. Default:
  // packs now, then writes the word.
  virtual Status pack_signal(const Message& m, const void* user, void* dst, uint32_t* word,
                             uint32_t value);
  // Many pack_signal calls in one, in order. Default: one by one; the GPU
  // engine packs them in a few batch launches and writes all their words
  // with one more.
  struct PackSignal {
    Message m;
    const void* user = nullptr;
    void* dst = nullptr;
    uint32_t* word = nullptr;
    uint32_t value = 0;
  };
  virtual Status pack_signal_many(const std::vector<PackSignal>& jobs);
  // The host page holding the words pack_signal writes (registered once
  // where the engine must map host memory to write it).
  virtual Status map_words(void* page, size_t bytes) {
    (void)page;
    (void)bytes;
    return Status::ok();
  }
  // The same from another process's segment: a GPU reads a peer GPU's memory
  // far faster with its copy engines than with loads, so the bytes are
  // copied into local scratch first.
  virtual Status unpack_from_peer(const Message& m, const void* src, size_t received, void* user) {
    return unpack_from(m, src, received, user);
  }
  // A message read where it lies in another layout: `src` is a buffer of
  // `from` (a peer's, mapped here, in the peer's layout) holding from.bytes
  // packed bytes; the first `received` of them land in `user` as m lays
  // them out. Done when it returns. Default: packed from src into scratch,
  // then unpacked; the GPU engine packs straight into a contiguous m.
  virtual Status unpack_from_layout(const Message& m, const Message& from, const void* src,
                                    size_t received, void* user);
  // Unpacks `bytes` packed bytes (whole elements of m) from each src[i]
  // into dst[i], all issued before one wait: the many blocks of a
  // collective cost one synchronisation. Sources may be peers' segments.
  virtual Status unpack_batch(const Message& m, const std::vector<const void*>& src,
                              const std::vector<void*>& dst, size_t bytes);
  // Pipelined transfers of large staged messages. pack_chunked packs m and
  // hands each chunk of the packed bytes (`chunk` long, the last shorter) to
  // `ready` as soon as it is in host memory, so sending one chunk overlaps
  // copying the next; the staging it returns must live until the sends end.
  // unpack_chunked takes the first `received` bytes of s, calling
  // `arrived` for each chunk before using it, so copying one chunk up
  // overlaps receiving the next. The defaults do it all at once.
  // `idle`, where given, runs while a chunk's copy is still on its way (the
  // caller progresses the sends of the chunks before it). `keep`, where
  // given, gets the staging before the first `ready`: it then outlives the
  // chunks' sends even when a later chunk fails.
  using ChunkReady = std::function<Status(size_t off, size_t len, const void* host)>;
  using ChunkArrived = std::function<Status(size_t off, size_t len)>;
  virtual Result<Staged> pack_chunked(const Message& m, const void* user, size_t chunk,
                                      const ChunkReady& ready,
                                      const std::function<void()>& idle = {},
                                      Staged* keep = nullptr);
  virtual Status unpack_chunked(const Message& m, const Staged& s, size_t received, size_t chunk,
                                const ChunkArrived& arrived, void* user);
  // Plain copies between the user's memory and host memory, for types Loom
  // cannot read (their whole span goes through the host).
  virtual Status copy_to_host(void* host, const void* user, size_t bytes) = 0;
  virtual Status copy_from_host(void* user, const void* host, size_t bytes) = 0;
  // A plain copy between any two buffers the mover's engine reaches (device
  // memory, a peer's segment, host memory); done when it returns.
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // unpack_from_peer, issued now and done at the next wait_copies(): many
  // pulls cost one synchronisation. What must live until then (scratch,
  // kernel tables) is added to `keep`. Default: done now.
  virtual Status unpack_async(const Message& m, const void* src, size_t received, void* user,
                              std::vector<std::shared_ptr<void>>& keep) {
    (void)keep;
    return unpack_from_peer(m, src, received, user);
  }
  // unpack_async for many messages at once (the GPU engine batches their
  // kernels into few launches). `each` gets one status per item; a failed
  // item may be retried alone. Default: unpack_async one by one.
  struct UnpackItem {
    const Message* m = nullptr;
    const void* src = nullptr;
    size_t received = 0;
    void* user = nullptr;
    const Message* from = nullptr;  // src lies in this layout (unpack_from_layout); null: packed
    int device = -1;                // the GPU src lies on, where known (-1: ask the driver)
    // Set (a device address from gpu_word): the stream waits until this
    // word reaches wait_value before anything of the batch reads src.
    const uint32_t* wait_word = nullptr;
    uint32_t wait_value = 0;
  };
  // The address at which this mover's GPU work reads a word of host memory
  // (a ready word of a peer's page: the page is registered once). Where it
  // cannot, kUnsupported: the caller waits on the host instead.
  virtual Result<const uint32_t*> gpu_word(const uint32_t* host) {
    (void)host;
    return Status(Err::kUnsupported, "no GPU waits");
  }
  virtual void unpack_many_async(const std::vector<UnpackItem>& items,
                                 std::vector<std::shared_ptr<void>>& keep,
                                 std::vector<Status>& each) {
    each.clear();
    for (const UnpackItem& it : items)
      each.push_back(it.from ? unpack_from_layout(*it.m, *it.from, it.src, it.received, it.user)
                             : unpack_async(*it.m, it.src, it.received, it.user, keep));
  }
  virtual Status wait_copies() { return Status::ok(); }
  // pack_to(), issued now and done at the next wait_copies(); what must
  // live until then goes into `keep`. Default: done now.
  virtual Status pack_async(const Message& m, const void* user, void* dst,
                            std::vector<std::shared_ptr<void>>& keep) {
    (void)keep;
    return pack_to(m, user, dst);
  }
  // copy(), issued now and done at the next wait_copies(). Default: done now.
  virtual Status copy_async(void* dst, const void* src, size_t bytes) {
    return copy(dst, src, bytes);
  }
  // The GPU work the application queued before this call (on the legacy
  // default stream) is done: a buffer lent as it lies (zero-copy) holds its
  // bytes before a peer reads it. Packing needs no such wait: Loom's stream
  // runs after that work.
  virtual Status settle_user() { return Status::ok(); }
  // Bytes of staging and scratch handed out and not yet returned.
  virtual size_t bytes_in_use() const = 0;
};

std::unique_ptr<Mover> make_host_mover();
// kOneShot or kStaged; needs a CUDA build and a GPU.
// `nonblocking`: its stream neither waits for nor holds up the legacy default
// stream, and it never calls into that stream (for threads of Loom's own that
// run while the application's streams wait on them).
// `proxy` (may be null): the resident copy agent, which then makes the
// copies of contiguous peer messages up to `proxy_max` bytes.
Result<std::unique_ptr<Mover>> make_gpu_mover(Method m, bool nonblocking = false,
                                              pack::ProxyQueue* proxy = nullptr,
                                              size_t proxy_max = 0);

// The layout of m.count elements: the allocation-free view when it fits,
// else a Layout built from the form (kept in `owned`).
Result<pack::LayoutView> message_view(const Message& m, pack::Layout& owned);
// The byte runs (offsets from the user buffer) that hold the first `bytes`
// packed bytes of element `index`, for a partial last element.
std::vector<pack::Block> partial_runs(const Message& m, int64_t index, int64_t bytes);

// Bytes [lo, hi) from the user pointer that the message's data touches.
struct Span {
  int64_t lo = 0, hi = 0;
  int64_t size() const { return hi - lo; }
};
Span message_span(const Message& m);

// Receive staging that is reserved, not pinned or touched: its pages appear
// only where bytes land. For large receives while the device method is on,
// which mostly get a 128-byte header: pinning their full size (and evicting
// pinned pools to do it) would cost more than the message. Regions are
// reused by size class (mapping and unmapping each costs microseconds).
class ReservedPool {
 public:
  ~ReservedPool();
  Result<Staged> stage(size_t bytes);

 private:
  void put_back(void* p, size_t cls);
  static constexpr size_t kMaxCached = size_t{16} << 30;  // address space, mostly untouched
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // by class
  size_t cached_ = 0;
};

// The message's packed bytes lie in order and unbroken in the user's
// buffer, from user + *base: plain copies move them (and the zero-copy
// device method lends them as they lie).
bool contiguous_at(const Message& m, int64_t* base);

// Host engine: unpacks the first `received` packed bytes into `user` (host
// memory): whole elements, then the leading bytes of a partial one.
Status host_unpack_received(const Message& m, const void* packed, size_t received, void* user);

}  // namespace loom::transport
