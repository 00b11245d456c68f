// The device method over an MPI that cannot read GPU memory: the packed
// bytes go GPU to GPU through memory the sender lends (CUDA IPC), while the
// MPI carries a small header with the user's destination, tag and
// communicator, so matching, wildcards and order stay the MPI's own.
//
//   sender                                  receiver
//   pack into a lent segment
//   MPI send: header (128 B), user's   ──►  any receive Loom sees matches it
//   dest, tag, comm; returns: the           (device or host buffer), opens the
//   user's buffer is free again             segment (once per segment), unpacks
//                                           from it, fixes the status's count
//   segment back to its free list     ◄──   ack(seq) on Loom's own communicator
//
// Since any receive may match a header, every receive is checked while the
// device method is on (a 128-byte message with the job's magic, nonce and
// checksum), and the method is on for all ranks or for none: they agree at
// MPI_Init. Sends never wait for the ack, so no program that is safe with
// buffered sends can deadlock on it; segments come back as acks arrive
// (completion and blocking calls poll them, posts at most every
// kAckPollGapNs) and at finalize.
//
// Peers that cannot map the segment (other nodes; LOOM_NCCL_P2P) get the
// bytes by a channel instead (transport/channel.hpp): the receiver sends a
// ready message naming the message, the sender's progress thread starts the
// transfer (NCCL), the receiver receives it; the segment comes back when the
// transfer has read it. This needs MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "transport/arena.hpp"
#include "transport/channel.hpp"
#include "transport/message_wire.hpp"
#include "transport/mover.hpp"
#include "transport/peer_memory.hpp"
#include "transport/ready_flags.hpp"

namespace loom::transport {

struct Header {
  uint32_t magic = 0;
  uint32_t layout = 0;  // kZeroCopy: the sender's layout (0: the bytes lie contiguous)
  uint64_t nonce = 0;   // the job's, from rank 0 at MPI_Init
  uint64_t seq = 0;     // the sender's, echoed in the ack
  int32_t sender = 0;   // world rank, where the ack goes
  int32_t kind = 0;     // kSegment or kChunks
  // The 32 bytes above are enough to ack a header the MPI truncated.
  uint64_t bytes = 0;   // packed bytes in the segment, or in all chunks
  uint64_t offset = 0;  // kSegment: where they start; kChunks: the chunk size
  transport::PeerHandle handle;
  uint64_t check = 0;  // hash of the fields above
};
constexpr int kHeaderBytes = 128;
// kSegment: the bytes wait in a segment the sender lends (the device
// method). kChunks: they follow on Loom's communicator in chunks, each sent
// as soon as it reaches host memory (pipelined staged transfers).
// kZeroCopy: the bytes are the sender's own buffer, lent as they lie; the
// sender's request is the receive of the ack, so its send completes when
// the receiver has read them, as a rendezvous send of any MPI does. With
// `layout` set they lie in the sender's layout (a derived type), which went
// to the receiver once, on Loom's communicator, before the first such
// header: the receiver reads the packed bytes straight out of the sender's
// buffer (Rendezvous::sender_layout). kChannel: the bytes wait in a segment the receiver
// cannot map; the channel brings them once the receiver asks (Rendezvous::fetch).
enum HeaderKind : int32_t { kSegment = 0, kChunks = 1, kZeroCopy = 2, kChannel = 3 };
static_assert(sizeof(Header) == kHeaderBytes);

// A kSegment header for a message under kHeaderBytes, as long as the message
// itself, so any receive that would take the data takes it (and a probe
// counts the right size). The segment is a block of the sender's slab, which
// every process mapped knowledge of at MPI_Init, so no handle travels.
struct SmallHeader {
  uint32_t magic = 0;  // kSmallMagic
  int32_t sender = 0;
  uint64_t nonce = 0;
  uint64_t seq = 0;
  uint32_t offset = 0;  // in the sender's slab
  uint32_t bytes = 0;   // the message's packed bytes: the header's own length
  uint64_t check = 0;
};
constexpr int kSmallHeaderBytes = static_cast<int>(sizeof(SmallHeader));
static_assert(kSmallHeaderBytes == 40);

class Rendezvous {
 public:
  // Collective over MPI_COMM_WORLD. `want_device`: this rank would use the
  // device method (LOOM_METHOD); `chunk`: pipelined staged transfers in
  // chunks of this size (LOOM_PIPELINE_CHUNK; 0: none); `host_mode`: the host test mode (shared
  // memory instead of CUDA IPC). Each is on only when every rank wants it (and, for the device
  // method, can lend memory); null when neither is.
  // `want_zero_copy`: this rank would lend contiguous buffers as they lie
  // (LOOM_ZCOPY_MIN); on only where every rank wants it.
  // `want_native`: this rank's MPI moves device memory itself
  // (mpi_moves_device_memory); on only where every rank's does.
  static std::unique_ptr<Rendezvous> create(bool want_device, bool want_zero_copy, size_t chunk,
                                            bool host_mode, bool want_native = false);
  ~Rendezvous();

  // World rank of `rank` of comm when it is a process of this node, this
  // one included (the method needs shared memory between them); -1 otherwise.
  int peer_on_node(MPI_Comm comm, int rank);

  // Messages of device memory to `rank` of comm may go to the MPI as they
  // lie: the MPI moves device memory (every rank's does) and the peer is on
  // another node. Such a peer is never sent a header (it may receive
  // straight into device memory), so the pipelined chunks stay off for it.
  bool native_to(MPI_Comm comm, int rank) {
    return native_ && rank >= 0 && peer_on_node(comm, rank) < 0;
  }
  bool native() const { return native_; }

  // World rank `to` gets device-method messages by the channel (another
  // node, or every other process with LOOM_NCCL_P2P=force).
  bool channel_to(int to) const {
    return channel_ && to >= 0 && to != world_rank_ &&
           (channel_all_ ||
            node_of_[static_cast<size_t>(to)] != node_of_[static_cast<size_t>(world_rank_)]);
  }
  // The device method reaches `rank` of comm: a process of this node, or a channel peer.
  bool reaches(MPI_Comm comm, int rank) {
    return peer_on_node(comm, rank) >= 0 || channel_to(world_rank(comm, rank));
  }
  // The channel's name, or null when it is off.
  const char* channel_name() const { return channel_ ? channel_->name() : nullptr; }

  // The device method is on (memory is lent); pipelined chunks are on.
  bool lends() const { return mem_ != nullptr; }
  // The memory ranks of a node lend each other (null when the method is off),
  // shared with the node-local collectives.
  transport::PeerMemory* memory() const { return mem_.get(); }
  // Every rank of comm (an intra-communicator) is a process of this node.
  bool all_on_node(MPI_Comm comm);
  size_t chunk_bytes() const { return chunk_; }

  // The job's nonce (names of shared memory of this job).
  uint64_t nonce() const { return nonce_; }
  // The host test mode: peers lend shared memory, not CUDA IPC.
  bool host_mode() const { return host_mode_; }

  // World rank of `rank` of comm, or -1.
  int world_rank(MPI_Comm comm, int rank);
  int world_rank() const { return world_rank_; }

  // Sender: packs m from `user` into a lent segment and fills hdr. With
  // `wait` false the pack is only enqueued: the header may go at once (the
  // receiver reads the segment once the pack's ready word says so), and
  // `user` must stay unchanged until wait_packed(hdr->seq). `to`: the
  // receiver's world rank; a channel peer gets a kChannel header. `defer`
  // (with `wait` false): the pack may wait in the batch queue (flush_packs).
  Status lend(transport::Mover& mover, const transport::Message& m, const void* user, Header* hdr,
              bool wait = true, int to = -1, bool defer = false);
  // Stream-triggered messages (MPIX_*_enqueue, stream/enqueue.hpp) of one
  // node go through an arena each process lends once: collective over comm
  // (every stream communicator's making), it is made here (LOOM_STREAM_ARENA
  // bytes) and every process of comm on this node maps the others'. Stream
  // threads then read messages without mapping anything (a mapping made
  // while a stream waits for the thread may wait for that stream).
  Status share_stream_arena(MPI_Comm comm);
  // Sender: room in the arena for m's packed bytes, which the caller's
  // stream packs into; fills hdr (kSegment). kNoMemory when the arena is
  // full (or there is none). Once the stream has packed,
  // stream_packed(hdr->seq), then the header may go.
  // `early`: its header goes before its pack (LOOM_STREAM_EARLY_SEND): the
  // room comes back once acked and packed.
  Result<void*> lend_stream(const transport::Message& m, Header* hdr, bool early = false);
  void stream_packed(uint64_t seq);
  // Early lent sends (LOOM_STREAM_EARLY_SEND): the header goes when the
  // send is enqueued, and the sender's stream writes own_ready_word(seq)
  // once it has packed; a receiving stream waits for that word itself.
  // Collective over comm, in the making of a stream communicator: makes
  // this process's ready words, and those of the node's other processes in
  // comm, reachable by the GPU (`attach` registers a page mapped, read-only
  // for a peer's, and gives its device address; null in the host test mode,
  // where the host address serves). True where every rank of comm could
  // (and wants to).
  using AttachPage = std::function<Result<void*>(void* page, size_t bytes, bool read_only)>;
  Result<bool> share_ready_words(MPI_Comm comm, bool want, const AttachPage& attach);
  uint32_t* own_ready_word(uint64_t seq) { return flags_ ? flags_->own(seq) : nullptr; }
  // Where a stream reads the word of world rank peer's message seq (made
  // reachable by share_ready_words), or null.
  const uint32_t* ready_word_for_streams(int peer, uint64_t seq);
  // Device memory of this process's arena for `bytes` (scratch), or null.
  void* arena_take(size_t bytes);
  void arena_give(void* p, size_t bytes);
  // The smallest message the device method carries: under kHeaderBytes
  // with a SmallHeader where processes have slabs.
  int64_t device_min() const { return slabs_on_ ? kSmallHeaderBytes : kHeaderBytes; }
  // A received message of n bytes may be a header (is_header decides).
  bool may_be_header(size_t n) const {
    return n == static_cast<size_t>(kHeaderBytes) ||
           (slabs_on_ && n >= static_cast<size_t>(kSmallHeaderBytes) && n < kHeaderBytes);
  }
  // What goes on the wire for h (lend's, or a kChunks one): h itself, or for
  // a message under kHeaderBytes in the slab its SmallHeader, written into
  // *wire. Returns the bytes to send from *wire.
  int seal(const Header& h, Header* wire) const;
  // Sender: message seq's pack is done (its user buffer is free again).
  bool packed(uint64_t seq) const;
  // Flushes the deferred packs first, then waits for seq's.
  void wait_packed(uint64_t seq);
  // Sender: lend() defers packs (LOOM_BATCH_PACKS): a burst of sends pays a
  // few batch launches here instead of a launch and a word write each. Done
  // by progress(), wait_packed(), every batch_flush_ deferred packs, and a
  // thread of Loom's once no pack was deferred for kFlushAfterUs, so no
  // receiver waits on a sender that makes no more Loom calls.
  void flush_packs();
  static constexpr size_t kBatchFlush = 64;  // LOOM_BATCH_FLUSH's default
  static constexpr int kFlushAfterUs = 50;
  // Sender, zero-copy: lends the `bytes` at `data` (the caller's buffer, a
  // contiguous message to world rank `to`) and posts the receive of their
  // ack into *ack, which completes once the receiver has read them; fills
  // hdr. kUnsupported when the memory cannot be lent as it is.
  Status lend_user(const void* data, size_t bytes, int to, Header* hdr, MPI_Request* ack);
  // Sender, zero-copy of any layout: lends the bytes m's data spans at
  // `user` as they lie, sends the receiver the message's layout first where
  // it has not had it, and posts the ack's receive as lend_user does.
  // kUnsupported where the layout does not fit a small message
  // (kMaxLayoutBytes) or the memory cannot be lent.
  Status lend_typed(const transport::Message& m, const void* user, int to, Header* hdr,
                    MPI_Request* ack);
  static constexpr size_t kMaxLayoutBytes = 2048;  // goes eagerly with every MPI
  static constexpr size_t kMaxLayouts = 4096;      // a sender's, kept for good
  // Sender: the ack of zero-copy message `seq` arrived (its request completed).
  void acked(uint64_t seq);
  // Zero-copy sends are possible (the MPI's tag range leaves room for their acks).
  bool zero_copy() const { return mem_ && zc_tags_ > 0; }
  // Sender, pipelined: packs m and sends its chunks to world rank `to` on
  // Loom's communicator as each reaches host memory; fills hdr (kChunks),
  // which the caller sends on the user's envelope. The chunk sends finish in
  // the background (progress(), shutdown()); the user's buffer is free now.
  Status send_chunks(transport::Mover& mover, const transport::Message& m, const void* user, int to,
                     Header* hdr);
  // Receiver: a message it will not read (its receive was too small): the
  // segment is acked, or the chunks received and dropped.
  void discard(const Header& h);
  // Receiver: posts the receives of h's chunks into `host` (h.bytes long).
  std::vector<MPI_Request> post_chunk_recvs(const Header& h, void* host);
  // Receiver: true when the n bytes at p are a header of this job.
  bool is_header(const void* p, size_t n, Header* out) const;
  // Receiver: the packed bytes of h as this process addresses them, once
  // they are there (a segment's pack may still run when its header lands).
  // A message lent in its sender's layout (kZeroCopy with a layout): `ptr`
  // is the sender's user pointer as mapped here and `layout` the message as
  // it lies there (sender_layout); its bytes are read by packing that.
  struct Source {
    const void* ptr = nullptr;
    const transport::Message* layout = nullptr;
    int device = -1;  // the GPU a segment lies on (-1: not known, or not a GPU's)
    // open(h, false): the segment's pack is not done yet; its ready word
    // (host address) reaches ready_value once it is.
    const uint32_t* ready_word = nullptr;
    uint32_t ready_value = 0;
  };
  // `wait` false: returns at once, with ready_word set where the pack still
  // runs; the caller then waits for it (wait_ready, or its GPU work waits
  // for the word after flushed_then).
  Result<Source> open(const Header& h, bool wait = true);
  Status wait_ready(const Header& h);
  // Batches of pulls may have the GPU wait for senders' packs; not under
  // MPI_THREAD_MULTIPLE: the movers' streams are blocking, so such a wait
  // would also hold up another thread's work on the legacy stream.
  bool gpu_waits() const { return gpu_waits_; }
  // Runs f with every deferred pack of this process enqueued and none
  // deferred meanwhile: GPU work f enqueues that waits for a peer's ready
  // word then never sits ahead of a pack a peer waits for (no two ranks'
  // streams can wait for each other), whatever other threads send.
  template <class F>
  void flushed_then(F f) {
    std::lock_guard<std::mutex> lk(pack_mu_);
    flush_packs_locked();
    f();
  }
  // Receiver, kChannel: asks h's sender for the bytes and receives them into
  // dst (h.bytes, memory of this process's segments' kind). Transfers from
  // one sender are asked for and received in one order.
  Status fetch(const Header& h, void* dst);
  // The same for many at once: every ready goes out first, then the
  // transfers are received, so they overlap. One status per item.
  struct Fetch {
    const Header* h;
    void* dst;
  };
  std::vector<Status> fetch_many(const std::vector<Fetch>& items);
  // Receiver: done reading h's segment; the sender may reuse it (kChannel:
  // a message it will not fetch).
  void ack(const Header& h);
  // The same for many, in one message a sender (segments).
  void ack_all(const std::vector<const Header*>& hs);
  // Receiver: a receive into n bytes at p was truncated by the MPI; when
  // they begin with a header of this job, its segment is acked.
  void ack_if_truncated_header(const void* p, size_t n);

  // Flushes the deferred packs (unless `flush` is false: a send's own
  // call, which defers them) and returns the segments whose acks have
  // arrived. Cheap when none are lent. With `throttled`, or `flush` false,
  // it asks the MPI for acks at most every kAckPollGapNs: each ask is an
  // MPI_Iprobe, which runs the MPI's whole progress engine, and a burst of
  // posts (a halo's 208 a rank) asked once or twice a message. Posts and
  // local packs (plan_device) are throttled; completion and blocking calls
  // are not.
  void progress(bool flush = true, bool throttled = false);
  static constexpr int64_t kAckPollGapNs = 20000;
  // At finalize, collective: returns every segment and unmaps peers'.
  void shutdown();
  size_t bytes_lent() const;
  // Messages this rank sent and received by the method (for tests and logs).
  uint64_t messages_lent() const { return next_seq_.load() - 1; }
  uint64_t messages_pulled() const { return pulled_.load(); }
  uint64_t messages_chunked() const { return chunked_.load(); }
  // Zero-copy messages this rank lent in their own layout (lend_typed).
  uint64_t messages_lent_in_layout() const { return lent_typed_.load(); }
  uint64_t messages_channelled() const { return channelled_.load(); }

 private:
  Rendezvous() = default;
  const std::vector<int>* world_ranks(MPI_Comm comm);
  // Receives the acks (sequence numbers) of the message `probed` found.
  std::vector<uint64_t> recv_acks(const MPI_Status& probed);
  // The sender's progress thread: starts the channel transfers receivers
  // ask for, returns their segments when done.
  struct Ready;
  void serve();
  void serve_ready(const Ready& r, int from);
  // Serves the readies that have arrived, in order; true when any had.
  bool serve_readies();
  // Returns the segments whose transfers are done; true when any was.
  bool land_flights();
  void release_channelled(uint64_t seq);
  void stop_serving();
  void flush_packs_locked();  // under pack_mu_
  void flusher();             // the thread that flushes packs no call did
  void stop_flushing();

  MPI_Comm ctrl_ = MPI_COMM_NULL;  // Loom's own: acks never meet user messages
  bool gpu_waits_ = false;
  int keyval_ = MPI_KEYVAL_INVALID;
  uint64_t nonce_ = 0;
  bool host_mode_ = false;
  int world_rank_ = 0;
  std::vector<int> node_of_;  // world rank -> its node (lowest world rank there)
  std::unique_ptr<transport::PeerMemory> mem_;
  std::unique_ptr<transport::ReadyFlags> flags_;  // with mem_: segments' ready words
  std::mutex ready_pages_mu_;
  std::map<int, char*>
      ready_pages_;     // world rank -> its ready page as streams reach it (under ready_pages_mu_)
  std::mutex pack_mu_;  // packs are enqueued in sequence order: their words only grow
  transport::Mover* words_mover_ = nullptr;  // the mover that maps flags_ (under pack_mu_)
  struct Deferred {
    transport::Mover* mover;
    transport::Mover::PackSignal job;
  };
  bool batch_packs_ = false;
  size_t batch_flush_ = kBatchFlush;  // LOOM_BATCH_FLUSH
  std::vector<Deferred> deferred_;    // in sequence order (under pack_mu_)
  std::atomic<size_t> n_deferred_{0};
  std::atomic<int64_t> last_defer_ns_{0};  // steady clock of the latest deferred pack
  static int64_t now_ns();
  // Returns the blocks and segments whose acks came (throttled: not within
  // kAckPollGapNs of the last ask).
  void poll_acks(bool throttled);
  std::atomic<int64_t> acks_polled_ns_{0};
  std::mutex flush_mu_;
  std::condition_variable flush_cv_;
  bool flush_stop_ = false;  // under flush_mu_
  std::thread flusher_;
  std::mutex mu_;
  std::unordered_map<uint64_t, transport::Segment> lent_;  // by seq
  // A header of this rank's: magic, nonce, sender and the given fields
  // (the caller sets the rest, then its check).
  Header new_header(int32_t kind, uint64_t seq, uint64_t bytes) const;
  transport::Segment arena_seg_;                        // under arena_mu_ while made
  std::unique_ptr<transport::Arena> arena_;             // made once, under arena_mu_
  std::atomic<transport::Arena*> arena_live_{nullptr};  // arena_, published to other threads
  std::mutex arena_mu_;
  transport::Arena* arena() const { return arena_live_.load(std::memory_order_acquire); }
  std::unordered_map<uint64_t, std::pair<size_t, size_t>>
      arena_lent_;                           // seq -> (offset, bytes), under mu_
  std::unordered_set<uint64_t> early_lent_;  // arena_lent_'s early sends (under mu_)
  std::vector<uint64_t> acked_unpacked_;     // early sends acked before packed (under mu_)
  bool release_arena_block(uint64_t seq);    // under mu_; false: not the arena's or the slab's
  // Messages under kHeaderBytes: this process's slab, made at its first
  // such message on the device current then (ranks often choose their GPU
  // after MPI_Init; a slab made at MPI_Init would lie on device 0, where
  // another device's pack kernel cannot write), its handle published in a
  // shared page (slab_page_) that peers read at their first SmallHeader
  // from it. Every process has the device method or none does, so every
  // receiver knows small messages may be headers (slabs_on_).
  bool slabs_on_ = false;
  transport::Segment slab_seg_;
  std::unique_ptr<transport::Arena> slab_;             // made once, under slab_mu_
  std::atomic<transport::Arena*> slab_live_{nullptr};  // slab_, published to other threads
  bool slab_failed_ = false;                           // under slab_mu_
  std::string slab_page_;                              // its name, once made
  std::mutex slab_mu_;
  transport::Arena* slab() const { return slab_live_.load(std::memory_order_acquire); }
  transport::Arena* own_slab();  // made on first use; null: none
  mutable std::mutex peer_slabs_mu_;
  mutable std::vector<transport::PeerHandle> peer_slabs_;  // by world rank; size 0: not read yet
  bool peer_slab(int rank, transport::PeerHandle* out) const;
  std::unordered_map<uint64_t, std::pair<size_t, size_t>> slab_lent_;  // like arena_lent_
  // Fills hdr for a zero-copy message: `span` bytes at `data` lent, holding
  // `packed` bytes in layout `layout` (0: contiguous), and posts the ack's receive.
  Status lend_region(const void* data, size_t span, uint64_t packed, uint32_t layout, int to,
                     Header* hdr, MPI_Request* ack);
  // Layouts of zero-copy messages: a sender's, by (form, count, extent),
  // each with its id and wire bytes and the peers it went to; a receiver's
  // of each sender, by (sender, id). Under layout_mu_.
  struct SentLayout {
    type::NodePtr form;  // held: its address stays unique
    uint32_t id = 0;
    int64_t lo = 0, span = 0;
    std::vector<unsigned char> wire;
    std::vector<bool> sent_to;  // by world rank
  };
  // Receiver (open()): the message h (kZeroCopy with a layout) as it lies
  // in the sender's buffer. Receives the layout from h's sender if it is
  // new. *lo: where the lent bytes start from the sender's user pointer.
  Result<const transport::Message*> sender_layout(const Header& h, int64_t* lo);
  std::mutex layout_mu_;
  std::map<std::tuple<const type::Node*, int64_t, int64_t>, SentLayout> sent_layouts_;
  // m.form null: the bytes were no layout.
  std::map<std::pair<int, uint32_t>, std::unique_ptr<transport::PeerMessage>> peer_layouts_;
  uint32_t next_layout_ = 1;
  std::atomic<uint64_t> lent_typed_{0};
  // Zero-copy buffers of peers opened and not yet acked, by (sender, seq).
  std::map<std::pair<int, uint64_t>, transport::PeerHandle> zc_open_;
  std::atomic<size_t> n_lent_{0};
  std::atomic<uint64_t> next_seq_{1};
  std::atomic<uint64_t> pulled_{0};
  std::atomic<uint64_t> chunked_{0};
  size_t chunk_ = 0;  // 0: no pipelined chunks
  bool native_ = false;
  int zc_tags_ = 0;  // tags for zero-copy acks, above the chunks' (0: none)
  std::unordered_map<uint64_t, transport::Segment> copies_;  // zero-copy stand-ins, by seq
  struct Sending {
    std::vector<MPI_Request> reqs;
    transport::Staged hold;
  };
  std::vector<Sending> sending_;  // chunk sends not yet complete (under mu_)
  std::atomic<size_t> n_sending_{0};
  // Segment acks (ack_all) leave without blocking: a blocking send waits
  // while the peer's eager buffers are full, that is until the peer next
  // polls (stalls of milliseconds in a 104-message halo). Each is kept, its
  // payload with it, until its send completes (progress, shutdown).
  struct AckOut {
    std::vector<uint64_t> seqs;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  void send_ack(std::unique_ptr<AckOut> a, int to);
  void test_acks();
  std::mutex acks_mu_;
  std::vector<std::unique_ptr<AckOut>> acks_out_;  // under acks_mu_
  std::atomic<size_t> n_acks_out_{0};
  bool down_ = false;

  std::unique_ptr<transport::Channel> channel_;  // null: off
  bool channel_all_ = false;                     // every other process, this node's too
  std::unordered_map<uint64_t, transport::Segment> channelled_segs_;  // by seq (under mu_)
  std::atomic<size_t> n_channelled_{0};  // segments of channelled_segs_
  std::atomic<uint64_t> channelled_{0};
  std::mutex fetch_mu_;  // readies go out in the order their transfers are received
  std::mutex ready_mu_;  // one server of readies at a time: a pair's go in order
  std::mutex flights_mu_;
  std::vector<std::pair<uint64_t, uint64_t>> flights_;  // (ticket, seq) of transfers started
  std::atomic<size_t> n_flights_{0};
  std::mutex serve_mu_;
  std::condition_variable serve_cv_;
  bool stop_ = false;  // under serve_mu_
  std::thread server_;
};

}  // namespace loom::transport
