#include "transport/rendezvous.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "transport/message_wire.hpp"
#include "transport/shared_page.hpp"
#include "type/wire.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom::transport {
namespace {

constexpr uint32_t kMagic = 0x4d4f4f4c;       // "LOOM"
constexpr uint32_t kSmallMagic = 0x6d6f6f6c;  // "loom": a SmallHeader
constexpr int kAckTag = 1;
// A receiver's ready message: send me message `seq` by the channel.
constexpr int kReadyTag = 0;
constexpr int32_t kReadyDrop = 1;  // not wanted (truncated away): return its segment
// A sender's layout of zero-copy messages, before the first header naming it.
constexpr int kLayoutTag = 2;
// Chunks of message `seq` go with their own tag, so a receiver may take the
// sender's pipelined messages in any order; tags recur after kChunkTags.
constexpr int kChunkTag0 = 3, kChunkTags = 30000;
// The fixed part of a layout message; the encoded form (type/wire.hpp) follows.
// A zero-copy layout's id ahead of its bytes (transport/message_wire.hpp).
struct LayoutWire {
  uint32_t id = 0;
  uint32_t unused = 0;
};
int chunk_tag(uint64_t seq) {
  return kChunkTag0 + static_cast<int>(seq % kChunkTags);
}
// The ack of zero-copy message `seq` comes with its own tag, so the
// sender's request for it is a plain receive; tags recur after `n`.
constexpr int kZeroTag0 = kChunkTag0 + kChunkTags;
int zero_tag(uint64_t seq, int n) {
  return kZeroTag0 + static_cast<int>(seq % static_cast<uint64_t>(n));
}

// A hash of every field of a header before its `check`, eight bytes a step
// (an FNV-style multiply and a shift each, then a final mix): every
// message's header is hashed on both sides, and a bytewise FNV-1a showed
// as 5 % of a halo's host time in a profile.
template <class H>
uint64_t checksum_of(const H& h) {
  static_assert(offsetof(H, check) % sizeof(uint64_t) == 0);
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < offsetof(H, check); i += sizeof(uint64_t)) {
    uint64_t w;
    std::memcpy(&w, p + i, sizeof w);
    x = (x ^ w) * 1099511628211ull;
    x ^= x >> 29;
  }
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  return x ^ (x >> 32);
}
uint64_t checksum(const Header& h) {
  return checksum_of(h);
}
uint64_t small_checksum(const SmallHeader& h) {
  return checksum_of(h);
}

// Bumped whenever a communicator's rank map goes: the threads' one-entry
// caches of world_rank() hold a map only while this is unchanged.
std::atomic<uint64_t> g_ranks_gen{1};

int delete_ranks(MPI_Comm, int, void* attr, void*) {
  g_ranks_gen.fetch_add(1, std::memory_order_acq_rel);
  delete static_cast<std::vector<int>*>(attr);
  return MPI_SUCCESS;
}

}  // namespace

struct Rendezvous::Ready {
  uint64_t seq = 0;
  uint64_t bytes = 0;
  int32_t flags = 0;
  int32_t unused = 0;
};

std::unique_ptr<Rendezvous> Rendezvous::create(bool want_device, bool want_zero_copy, size_t chunk,
                                               bool host_mode, bool want_native) {
  int me = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::unique_ptr<transport::PeerMemory> mem;
  if (want_device && !host_mode) {
    auto m = transport::make_ipc_peer_memory();
    if (m)
      mem = std::move(m.value());
    else
      LOOM_INFO(kTransport, "device method off here: %s", m.status().message().c_str());
  }
  // Every rank takes part in the same collectives, whatever it can do. The
  // chunk size must agree too: the smallest wins, 0 (off) included.
  // The channel (LOOM_NCCL_P2P): 1 for peers on other nodes, 2 for every
  // other process; its sender thread calls the MPI.
  const std::string& np = knobs().nccl_p2p;
  int want_channel = np == "force" ? 2 : knob_true(np) ? 1 : 0;
  std::unique_ptr<transport::Channel> nccl;
  if (want_channel) {
    int provided = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      LOOM_WARN(kTransport, "LOOM_NCCL_P2P is off: the MPI gave no MPI_THREAD_MULTIPLE");
      want_channel = 0;
    } else if (!host_mode) {
      auto c = transport::make_nccl_channel(me);
      if (c) {
        nccl = std::move(c.value());
      } else {
        LOOM_WARN(kTransport, "LOOM_NCCL_P2P is off here: %s", c.status().message().c_str());
        want_channel = 0;
      }
    }
  }
  int can[5] = {want_device && (host_mode || mem) ? 1 : 0,
                static_cast<int>(std::min<size_t>(chunk, size_t{1} << 30)), want_zero_copy ? 1 : 0,
                want_native ? 1 : 0, want_channel};
  int all[5] = {0, 0, 0, 0, 0};
  PMPI_Allreduce(can, all, 5, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (want_channel && !all[4])
    LOOM_INFO(kTransport, "LOOM_NCCL_P2P is off: not every rank can or wants it alike");
  if (want_device && !all[0])
    LOOM_INFO(kTransport, "device method off: not every rank can lend memory");
  if (want_native && !all[3])
    LOOM_INFO(kTransport, "device memory to the MPI: off, not every rank's MPI moves it");
  if (!all[0] && !all[1] && !all[3]) return nullptr;
  if (!all[0]) mem.reset();
  std::unique_ptr<Rendezvous> rv(new Rendezvous());
  rv->world_rank_ = me;
  rv->chunk_ = static_cast<size_t>(all[1]);
  rv->native_ = all[3] != 0;
  rv->host_mode_ = host_mode;
  if (me == 0) {
    std::random_device rd;
    rv->nonce_ = (uint64_t{rd()} << 32) ^ rd() ^
                 static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  PMPI_Bcast(&rv->nonce_, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (all[0] && host_mode) mem = transport::make_shm_peer_memory(rv->nonce_, me);
  if (all[0]) {  // segments need ready words on every rank, or the method is off for all
    auto f = transport::ReadyFlags::create(rv->nonce_, me);
    int ok = f ? 1 : 0, all_ok = 0;
    if (!f) LOOM_WARN(kTransport, "device method off: %s", f.status().message().c_str());
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_ok)
      rv->flags_ = std::move(f.value());
    else
      mem.reset();
  }
  rv->mem_ = std::move(mem);
  if (rv->mem_ && all[4]) {  // the channel needs segments to send from
    rv->channel_ = host_mode ? transport::make_mpi_channel(MPI_COMM_WORLD) : std::move(nccl);
    rv->channel_all_ = all[4] == 2;
  }

  MPI_Comm node;
  PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int leader = me, size = 0;
  PMPI_Allreduce(&me, &leader, 1, MPI_INT, MPI_MIN, node);
  PMPI_Comm_free(&node);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  rv->node_of_.resize(static_cast<size_t>(size));
  PMPI_Allgather(&leader, 1, MPI_INT, rv->node_of_.data(), 1, MPI_INT, MPI_COMM_WORLD);
  if (knob_true(knobs().test_off_node))  // one rank per node, as far as Loom can tell
    for (int r = 0; r < size; ++r) rv->node_of_[static_cast<size_t>(r)] = r;

  if (rv->channel_) {  // every pair now, while nothing of the channel runs (channel.hpp)
    std::vector<int> peers;
    for (int r = 0; r < size; ++r)
      if (rv->channel_to(r)) peers.push_back(r);
    Status c = rv->channel_->connect(MPI_COMM_WORLD, peers);
    int ok = c ? 1 : 0, all_ok = 0;
    if (!c) LOOM_WARN(kTransport, "LOOM_NCCL_P2P is off: %s", c.message().c_str());
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) rv->channel_.reset();
  }
  PMPI_Comm_dup(MPI_COMM_WORLD, &rv->ctrl_);
  // Zero-copy acks take tags above the chunks'. MPI promises only 32767; a
  // tag range under 2^20 would recur while acks may still be outstanding.
  void* ub = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  const long long tag_ub = found && ub ? *static_cast<int*>(ub) : 32767;
  if (all[0] && all[2] && tag_ub - kZeroTag0 >= (1 << 20))
    rv->zc_tags_ = static_cast<int>(tag_ub - kZeroTag0);
  rv->slabs_on_ = rv->mem_ != nullptr;
  rv->peer_slabs_.resize(static_cast<size_t>(size));
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_ranks, &rv->keyval_, nullptr);
  if (rv->mem_)
    LOOM_INFO(kTransport, "device method on: %s between processes of a node", rv->mem_->name());
  if (rv->channel_)
    LOOM_INFO(kTransport, "device method to %s: by %s",
              rv->channel_all_ ? "every other process" : "other nodes", rv->channel_->name());
  // Not under MPI_THREAD_MULTIPLE by default (docs/interposer.md): a race
  // of the request table with threads showed there first (fixed), and a
  // multi-threaded soak stalled once with batching on (not understood).
  int level = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&level);
  const std::string& bp = knobs().batch_packs;
  rv->batch_packs_ = bp == "auto" ? level != MPI_THREAD_MULTIPLE : knob_true(bp);
  rv->gpu_waits_ = level != MPI_THREAD_MULTIPLE;
  rv->batch_flush_ = static_cast<size_t>(std::max(1LL, std::atoll(knobs().batch_flush.c_str())));
  if (rv->chunk_)
    LOOM_INFO(kTransport, "pipelined staged transfers on: chunks of %zu bytes", rv->chunk_);
  if (rv->native_)
    LOOM_INFO(kTransport,
              "device memory to the MPI: contiguous device messages to other nodes go to it as "
              "they lie");
  return rv;
}

Rendezvous::~Rendezvous() {
  if (!down_) shutdown();
}

const std::vector<int>* Rendezvous::world_ranks(MPI_Comm comm) {
  void* attr = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, keyval_, &attr, &found);
  if (found) return static_cast<std::vector<int>*>(attr);
  MPI_Group g, world;
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter)
    PMPI_Comm_remote_group(comm, &g);
  else
    PMPI_Comm_group(comm, &g);
  PMPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  PMPI_Group_size(g, &n);
  std::vector<int> in(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) in[i] = i;
  auto* out = new std::vector<int>(static_cast<size_t>(n));
  PMPI_Group_translate_ranks(g, n, in.data(), world, out->data());
  PMPI_Group_free(&g);
  PMPI_Group_free(&world);
  PMPI_Comm_set_attr(comm, keyval_, out);
  return out;
}

int Rendezvous::world_rank(MPI_Comm comm, int rank) {
  if (rank < 0) return -1;  // MPI_PROC_NULL and the like
  int w = rank;
  if (comm != MPI_COMM_WORLD) {
    // A message asks this two or three times (its plan, its lend), each a
    // lock and an attribute lookup of the MPI's (another lock): the last
    // communicator's map is kept per thread while no map has been freed.
    struct Last {
      const Rendezvous* rv = nullptr;
      MPI_Comm comm = MPI_COMM_NULL;
      uint64_t gen = 0;
      const std::vector<int>* ranks = nullptr;
    };
    thread_local Last last;
    const uint64_t gen = g_ranks_gen.load(std::memory_order_acquire);
    const std::vector<int>* ranks = nullptr;
    if (last.rv == this && last.comm == comm && last.gen == gen) {
      ranks = last.ranks;
    } else {
      std::lock_guard<std::mutex> lk(mu_);  // one attribute per comm, set once
      ranks = world_ranks(comm);
      last = {this, comm, gen, ranks};
    }
    if (static_cast<size_t>(rank) >= ranks->size()) return -1;
    w = (*ranks)[static_cast<size_t>(rank)];
  }
  if (w < 0 || static_cast<size_t>(w) >= node_of_.size()) return -1;
  return w;
}

bool Rendezvous::all_on_node(MPI_Comm comm) {
  const std::vector<int>* ranks = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);  // world_ranks may set the attribute
    ranks = world_ranks(comm);
  }
  const int mine = node_of_[static_cast<size_t>(world_rank_)];
  for (int w : *ranks)
    if (w < 0 || static_cast<size_t>(w) >= node_of_.size() ||
        node_of_[static_cast<size_t>(w)] != mine)
      return false;
  return true;
}

int Rendezvous::peer_on_node(MPI_Comm comm, int rank) {
  const int w = world_rank(comm, rank);
  if (w < 0) return -1;
  return node_of_[static_cast<size_t>(w)] == node_of_[static_cast<size_t>(world_rank_)] ? w : -1;
}

Status Rendezvous::send_chunks(transport::Mover& mover, const transport::Message& m,
                               const void* user, int to, Header* hdr) {
  progress();
  const uint64_t seq = next_seq_.fetch_add(1);
  Sending out;
  const size_t chunk = chunk_;
  transport::Staged keep;  // the staging, held until the chunks' sends end
  auto staged = mover.pack_chunked(
      m, user, chunk,
      [&](size_t off, size_t len, const void* host) {
        MPI_Request r;
        const int rc = PMPI_Isend(static_cast<const char*>(host) + off, static_cast<int>(len),
                                  MPI_BYTE, to, chunk_tag(seq), ctrl_, &r);
        if (rc != MPI_SUCCESS) return Status(Err::kMpi, "sending a chunk");
        out.reqs.push_back(r);
        return Status::ok();
      },
      {}, &keep);
  if (!staged) {  // chunks already out must still finish before their staging goes
    if (!out.reqs.empty())
      PMPI_Waitall(static_cast<int>(out.reqs.size()), out.reqs.data(), MPI_STATUSES_IGNORE);
    return staged.status();
  }
  out.hold = std::move(staged.value());
  *hdr = new_header(kChunks, seq, static_cast<uint64_t>(m.bytes));
  hdr->offset = chunk;
  hdr->check = checksum(*hdr);
  chunked_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(mu_);
  sending_.push_back(std::move(out));
  n_sending_.fetch_add(1, std::memory_order_release);
  return Status::ok();
}

void Rendezvous::discard(const Header& h) {
  if (h.kind == kSegment || h.kind == kZeroCopy || h.kind == kChannel) {
    ack(h);
    return;
  }
  std::vector<char> sink(static_cast<size_t>(h.bytes));
  std::vector<MPI_Request> reqs = post_chunk_recvs(h, sink.data());
  PMPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
}

std::vector<MPI_Request> Rendezvous::post_chunk_recvs(const Header& h, void* host) {
  std::vector<MPI_Request> reqs;
  for (uint64_t off = 0; off < h.bytes; off += h.offset) {
    const int len = static_cast<int>(std::min<uint64_t>(h.offset, h.bytes - off));
    MPI_Request r;
    PMPI_Irecv(static_cast<char*>(host) + off, len, MPI_BYTE, h.sender, chunk_tag(h.seq), ctrl_,
               &r);
    reqs.push_back(r);
  }
  pulled_.fetch_add(1, std::memory_order_relaxed);
  return reqs;
}

Status Rendezvous::lend(transport::Mover& mover, const transport::Message& m, const void* user,
                        Header* hdr, bool wait, int to, bool defer) {
  const bool by_channel = channel_to(to);
  progress(/*flush=*/false);
  stats::Scope phase(stats::kLend);
  // Under a header's size: a block of the slab, whose SmallHeader fits any
  // receive the data fits (seal); never a full header.
  const bool small = m.bytes < kHeaderBytes;
  std::optional<size_t> slab_at;
  Result<transport::Segment> seg = transport::Segment{};
  if (small) {
    transport::Arena* sl = by_channel || m.bytes < kSmallHeaderBytes ? nullptr : own_slab();
    if (!sl) return Status(Err::kUnsupported, "no slab for a message under a header's size");
    slab_at = sl->take(static_cast<size_t>(m.bytes));
    if (!slab_at) {  // acks not yet asked for may return blocks
      poll_acks(/*throttled=*/false);
      slab_at = sl->take(static_cast<size_t>(m.bytes));
    }
    if (!slab_at) return Status(Err::kNoMemory, "the slab is full");
  } else {
    stats::Scope take(stats::kAcquire);
    seg = mem_->acquire(static_cast<size_t>(m.bytes));
    if (!seg) {
      poll_acks(/*throttled=*/false);
      seg = mem_->acquire(static_cast<size_t>(m.bytes));
    }
    if (!seg) return seg.status();
  }
  void* dst = small ? static_cast<char*>(slab_seg_.ptr) + *slab_at : seg->ptr;
  uint64_t seq = 0;
  Status s;
  {
    std::lock_guard<std::mutex> lk(pack_mu_);
    if (words_mover_ != &mover) {  // once: a mover that cannot map them packs and waits
      if (Status w = mover.map_words(flags_->page(), flags_->page_bytes()); !w)
        LOOM_DEBUG(kTransport, "ready words not mapped (%s): lends wait for their packs",
                   w.message().c_str());
      words_mover_ = &mover;
    }
    seq = next_seq_.fetch_add(1);
    if (batch_packs_ && defer && !wait && m.bytes > 0) {
      deferred_.push_back({&mover, {m, user, dst, flags_->own(seq), static_cast<uint32_t>(seq)}});
      last_defer_ns_.store(now_ns(), std::memory_order_relaxed);
      if (n_deferred_.fetch_add(1, std::memory_order_release) == 0) {
        std::lock_guard<std::mutex> fl(flush_mu_);
        if (!flusher_.joinable() && !flush_stop_)
          flusher_ = std::thread(&Rendezvous::flusher, this);
        flush_cv_.notify_one();
      }
      if (deferred_.size() >= batch_flush_) flush_packs_locked();
    } else {
      flush_packs_locked();  // earlier messages' first: words only grow
      s = mover.pack_signal(m, user, dst, flags_->own(seq), static_cast<uint32_t>(seq));
    }
  }
  if (s && wait) wait_packed(seq);
  LOOM_DEBUG(kTransport, "lend: %lld bytes %s", static_cast<long long>(m.bytes),
             wait ? "packed" : "pack enqueued");
  if (!s) {  // nothing was enqueued after the failure; the word is never written
    if (small)
      slab()->give(*slab_at, static_cast<size_t>(m.bytes));
    else
      mem_->release(seg.value());
    return s;
  }
  *hdr = new_header(by_channel ? kChannel : kSegment, seq, static_cast<uint64_t>(m.bytes));
  if (small) {
    hdr->offset = *slab_at;
    hdr->handle = slab_seg_.handle;
    hdr->check = checksum(*hdr);
    std::lock_guard<std::mutex> lk(mu_);  // until its ack
    slab_lent_.emplace(hdr->seq, std::make_pair(*slab_at, static_cast<size_t>(m.bytes)));
    n_lent_.fetch_add(1, std::memory_order_release);
    return Status::ok();
  }
  if (by_channel) {
    hdr->check = checksum(*hdr);
    {
      std::lock_guard<std::mutex> lk(mu_);
      channelled_segs_.emplace(hdr->seq, seg.value());
    }
    std::lock_guard<std::mutex> lk(serve_mu_);
    n_channelled_.fetch_add(1, std::memory_order_release);
    if (!server_.joinable() && !stop_) server_ = std::thread(&Rendezvous::serve, this);
    serve_cv_.notify_one();
    return Status::ok();
  }
  hdr->handle = seg->handle;
  hdr->check = checksum(*hdr);
  std::lock_guard<std::mutex> lk(mu_);  // until its ack
  lent_.emplace(hdr->seq, seg.value());
  n_lent_.fetch_add(1, std::memory_order_release);
  return Status::ok();
}

Header Rendezvous::new_header(int32_t kind, uint64_t seq, uint64_t bytes) const {
  Header h;
  h.magic = kMagic;
  h.nonce = nonce_;
  h.seq = seq;
  h.sender = world_rank_;
  h.kind = kind;
  h.bytes = bytes;
  return h;
}

namespace {
// The page a process publishes its slab's handle in.
struct SlabPage {
  std::atomic<uint32_t> ready;  // 1 once handle is written
  uint32_t pad;
  transport::PeerHandle handle;
};
}  // namespace

transport::Arena* Rendezvous::own_slab() {
  if (transport::Arena* a = slab()) return a;
  std::lock_guard<std::mutex> lk(slab_mu_);
  if (slab_ || slab_failed_ || !slabs_on_) return slab_.get();
  slab_failed_ = true;  // until it is made
  // Room for thousands of small messages in flight (blocks of
  // Arena::kAlign); the host test mode's shared memory is kept small.
  const size_t size = host_mode_ ? size_t{256} << 10 : size_t{2} << 20;
  auto seg = mem_->acquire(size);
  if (!seg) {
    LOOM_INFO(kTransport, "no slab (%s): device messages under %d bytes are staged",
              seg.status().message().c_str(), kHeaderBytes);
    return nullptr;
  }
  const std::string name = transport::shared_page_name(nonce_, world_rank_, "slab");
  auto page = transport::shared_page_create(name, sizeof(SlabPage));
  if (!page) {
    mem_->release(seg.value());
    LOOM_INFO(kTransport, "no slab (%s): device messages under %d bytes are staged",
              page.status().message().c_str(), kHeaderBytes);
    return nullptr;
  }
  auto* sp = static_cast<SlabPage*>(page.value());
  sp->handle = seg->handle;
  sp->ready.store(1, std::memory_order_release);  // before any SmallHeader goes out
  slab_seg_ = seg.value();
  slab_page_ = name;
  slab_ = std::make_unique<transport::Arena>(slab_seg_.size);
  slab_failed_ = false;
  slab_live_.store(slab_.get(), std::memory_order_release);
  return slab_.get();
}

bool Rendezvous::peer_slab(int rank, transport::PeerHandle* out) const {
  std::lock_guard<std::mutex> lk(peer_slabs_mu_);
  if (rank < 0 || static_cast<size_t>(rank) >= peer_slabs_.size()) return false;
  transport::PeerHandle& h = peer_slabs_[static_cast<size_t>(rank)];
  if (h.size == 0) {  // its sender published it before its first SmallHeader
    auto p = transport::shared_page_map(transport::shared_page_name(nonce_, rank, "slab"),
                                        sizeof(SlabPage), false);
    const auto* sp = p ? static_cast<const SlabPage*>(p.value()) : nullptr;
    if (!sp || sp->ready.load(std::memory_order_acquire) != 1) {
      LOOM_LOG(kError, kTransport, "a small message's header from rank %d, whose slab is unknown",
               rank);
      return false;
    }
    h = sp->handle;
  }
  *out = h;
  return true;
}

int Rendezvous::seal(const Header& h, Header* wire) const {
  if (h.kind != kSegment || h.bytes >= static_cast<uint64_t>(kHeaderBytes) || !slab()) {
    *wire = h;
    return kHeaderBytes;
  }
  SmallHeader sh;
  sh.magic = kSmallMagic;
  sh.sender = h.sender;
  sh.nonce = h.nonce;
  sh.seq = h.seq;
  sh.offset = static_cast<uint32_t>(h.offset);
  sh.bytes = static_cast<uint32_t>(h.bytes);
  sh.check = small_checksum(sh);
  std::memset(static_cast<void*>(wire), 0, sizeof(Header));
  std::memcpy(static_cast<void*>(wire), &sh, sizeof sh);
  return static_cast<int>(h.bytes);
}

Status Rendezvous::share_stream_arena(MPI_Comm comm) {
  if (!mem_) return Status::ok();
  {
    std::lock_guard<std::mutex> lk(arena_mu_);
    if (!arena_) {
      const int64_t want = std::atoll(knobs().stream_arena.c_str());
      // The host test mode lends shared memory, which containers keep small.
      const size_t size =
          host_mode_ ? size_t{4} << 20 : static_cast<size_t>(std::max<int64_t>(want, 0));
      if (size > 0) {
        auto seg = mem_->acquire(size);
        if (seg) {
          arena_seg_ = seg.value();
          arena_ = std::make_unique<transport::Arena>(arena_seg_.size);
          arena_live_.store(arena_.get(), std::memory_order_release);
        } else {
          LOOM_WARN(kTransport, "no stream arena (%s): enqueued device messages are staged",
                    seg.status().message().c_str());
        }
      }
    }
  }
  struct Entry {
    int32_t world = -1, has = 0;
    transport::PeerHandle handle;
  } mine;
  mine.world = world_rank_;
  mine.has = arena() ? 1 : 0;
  if (arena()) mine.handle = arena_seg_.handle;
  int n = 0;
  PMPI_Comm_size(comm, &n);
  std::vector<Entry> all(static_cast<size_t>(n));
  if (PMPI_Allgather(&mine, sizeof(Entry), MPI_BYTE, all.data(), sizeof(Entry), MPI_BYTE, comm) !=
      MPI_SUCCESS)
    return Status(Err::kMpi, "exchanging stream arenas");
  for (const Entry& e : all) {
    if (!e.has || e.world == world_rank_ || e.world < 0 ||
        static_cast<size_t>(e.world) >= node_of_.size() ||
        node_of_[static_cast<size_t>(e.world)] != node_of_[static_cast<size_t>(world_rank_)])
      continue;
    if (auto p = mem_->open(e.handle, e.world); !p)
      LOOM_WARN(kTransport, "rank %d's stream arena cannot be mapped (%s)", e.world,
                p.status().message().c_str());
  }
  return Status::ok();
}

Result<bool> Rendezvous::share_ready_words(MPI_Comm comm, bool want, const AttachPage& attach) {
  int ok = want && flags_ ? 1 : 0;
  int n = 0;
  PMPI_Comm_size(comm, &n);
  const int node = node_of_[static_cast<size_t>(world_rank_)];
  for (int r = 0; ok && r < n; ++r) {
    const int w = world_rank(comm, r);
    if (w < 0 || static_cast<size_t>(w) >= node_of_.size() ||
        node_of_[static_cast<size_t>(w)] != node)
      continue;  // off the node: never lent
    {
      std::lock_guard<std::mutex> lk(ready_pages_mu_);
      if (ready_pages_.count(w)) continue;
    }
    void* page = nullptr;
    if (w == world_rank_) {
      page = flags_->page();
    } else if (auto p = flags_->peer_word(w, 0); p) {
      page = const_cast<uint32_t*>(p.value());  // word 0 starts the page
    } else {
      LOOM_DEBUG(kTransport, "early sends off: rank %d's ready words: %s", w,
                 p.status().message().c_str());
      ok = 0;
      break;
    }
    void* reach = page;
    if (attach) {
      auto d = attach(page, transport::ReadyFlags::page_bytes(), w != world_rank_);
      if (!d) {
        LOOM_DEBUG(kTransport, "early sends off: rank %d's ready words for the GPU: %s", w,
                   d.status().message().c_str());
        ok = 0;
        break;
      }
      reach = d.value();
    }
    std::lock_guard<std::mutex> lk(ready_pages_mu_);
    ready_pages_.emplace(w, static_cast<char*>(reach));
  }
  int all = 0;
  if (PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
    return Status(Err::kMpi, "agreeing on early sends");
  return all == 1;
}

const uint32_t* Rendezvous::ready_word_for_streams(int peer, uint64_t seq) {
  std::lock_guard<std::mutex> lk(ready_pages_mu_);
  auto it = ready_pages_.find(peer);
  if (it == ready_pages_.end()) return nullptr;
  return reinterpret_cast<const uint32_t*>(it->second) + seq % transport::ReadyFlags::kWords;
}

Result<void*> Rendezvous::lend_stream(const transport::Message& m, Header* hdr, bool early) {
  progress(/*flush=*/false);  // blocks acked since come back first
  transport::Arena* a = arena();
  if (!a) return Status(Err::kNoMemory, "no stream arena");
  auto at = a->take(static_cast<size_t>(m.bytes));
  if (!at) {
    poll_acks(/*throttled=*/false);
    at = a->take(static_cast<size_t>(m.bytes));
  }
  if (!at) return Status(Err::kNoMemory, "the stream arena is full");
  uint64_t seq = 0;
  if (!early) {
    seq = next_seq_.fetch_add(1);
  } else {
    // An early send's stream writes its ready word whenever it gets there,
    // out of sequence order: its word (seq % kWords) must have seen the
    // previous message that uses it, or that one's late write could pass
    // for this one (or this one's for that).
    for (seq = next_seq_.load();;) {
      if (flags_ && seq >= ReadyFlags::kWords && !flags_->own_ready(seq - ReadyFlags::kWords)) {
        a->give(*at, static_cast<size_t>(m.bytes));
        return Status(Err::kNoMemory, "the ready word of an earlier message is not written yet");
      }
      if (next_seq_.compare_exchange_weak(seq, seq + 1)) break;
    }
  }
  *hdr = new_header(kSegment, seq, static_cast<uint64_t>(m.bytes));
  hdr->offset = *at;
  hdr->handle = arena_seg_.handle;
  hdr->check = checksum(*hdr);
  {
    std::lock_guard<std::mutex> lk(mu_);
    arena_lent_.emplace(hdr->seq, std::make_pair(*at, static_cast<size_t>(m.bytes)));
    if (early) early_lent_.insert(hdr->seq);
    n_lent_.fetch_add(1, std::memory_order_release);
  }
  return static_cast<char*>(arena_seg_.ptr) + *at;
}

bool Rendezvous::release_arena_block(uint64_t seq) {
  // An early send's room is acked once its receiver is done with it, or has
  // given it up (a truncation, an error) maybe before the sender's stream
  // packed into it: then it waits for the pack's ready word too.
  if (auto e = early_lent_.find(seq); e != early_lent_.end()) {
    if (flags_ && !flags_->own_ready(seq)) {
      acked_unpacked_.push_back(seq);
      return true;
    }
    early_lent_.erase(e);
  }
  // A block of the slab or of the stream arena: back to its allocator.
  auto give = [&](auto& lent, transport::Arena* from) {
    auto it = lent.find(seq);
    if (it == lent.end()) return false;
    from->give(it->second.first, it->second.second);
    lent.erase(it);
    n_lent_.fetch_sub(1, std::memory_order_release);
    return true;
  };
  return give(slab_lent_, slab()) || give(arena_lent_, arena());
}

void* Rendezvous::arena_take(size_t bytes) {
  transport::Arena* a = arena();
  if (!a) return nullptr;
  auto at = a->take(bytes);
  return at ? static_cast<char*>(arena_seg_.ptr) + *at : nullptr;
}

void Rendezvous::arena_give(void* p, size_t bytes) {
  if (transport::Arena* a = arena(); a && p)
    a->give(static_cast<size_t>(static_cast<char*>(p) - static_cast<char*>(arena_seg_.ptr)), bytes);
}

void Rendezvous::stream_packed(uint64_t seq) {
  if (flags_)
    reinterpret_cast<std::atomic<uint32_t>*>(flags_->own(seq))
        ->store(static_cast<uint32_t>(seq), std::memory_order_release);
}

Status Rendezvous::fetch(const Header& h, void* dst) {
  return fetch_many({{&h, dst}}).front();
}

std::vector<Status> Rendezvous::fetch_many(const std::vector<Fetch>& items) {
  std::vector<Status> out(items.size());
  // Held throughout: this thread's readies and receives of one sender are
  // in one order, which another thread's must not interleave.
  std::lock_guard<std::mutex> lk(fetch_mu_);
  for (size_t i = 0; i < items.size(); ++i) {
    const Header& h = *items[i].h;
    Ready r;
    r.seq = h.seq;
    r.bytes = h.bytes;
    if (PMPI_Send(&r, sizeof r, MPI_BYTE, h.sender, kReadyTag, ctrl_) != MPI_SUCCESS)
      out[i] = Status(Err::kMpi, "sending a ready message");
    LOOM_DEBUG(kTransport, "channel: asked rank %d for message %llu (%llu bytes)", h.sender,
               static_cast<unsigned long long>(h.seq), static_cast<unsigned long long>(h.bytes));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (!out[i]) continue;
    out[i] =
        channel_->recv(items[i].h->sender, items[i].dst, static_cast<size_t>(items[i].h->bytes));
    LOOM_DEBUG(kTransport, "channel: received message %llu from rank %d",
               static_cast<unsigned long long>(items[i].h->seq), items[i].h->sender);
    if (out[i]) pulled_.fetch_add(1, std::memory_order_relaxed);
  }
  return out;
}

void Rendezvous::serve() {
  for (int idle = 0;;) {
    {
      std::unique_lock<std::mutex> lk(serve_mu_);
      serve_cv_.wait(lk, [&] {
        return stop_ || n_flights_.load(std::memory_order_acquire) != 0 ||
               n_channelled_.load(std::memory_order_acquire) != 0;
      });
    }
    bool busy = serve_readies();
    busy = land_flights() || busy;
    {
      std::lock_guard<std::mutex> lk(serve_mu_);
      // Messages never asked for stay lent (finalize returns them).
      if (stop_ && n_flights_.load(std::memory_order_acquire) == 0) return;
    }
    // A receiver asks within microseconds of matching: spin (yielding, as
    // ranks may share cores) for a while, then poll gently.
    if (busy)
      idle = 0;
    else if (++idle > 20000)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::yield();
  }
}

bool Rendezvous::serve_readies() {
  std::lock_guard<std::mutex> lk(ready_mu_);
  bool any = false;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    PMPI_Iprobe(MPI_ANY_SOURCE, kReadyTag, ctrl_, &flag, &st);
    if (!flag) return any;
    Ready r;
    PMPI_Recv(&r, sizeof r, MPI_BYTE, st.MPI_SOURCE, kReadyTag, ctrl_, MPI_STATUS_IGNORE);
    serve_ready(r, st.MPI_SOURCE);
    any = true;
  }
}

bool Rendezvous::land_flights() {
  if (n_flights_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lk(flights_mu_);
  bool any = false;
  for (size_t i = 0; i < flights_.size();) {
    auto d = channel_->done(flights_[i].first);
    if (d && !d.value()) {
      ++i;
      continue;
    }
    if (!d)
      LOOM_LOG(kError, kTransport, "channel send of message %llu failed: %s",
               static_cast<unsigned long long>(flights_[i].second), d.status().message().c_str());
    release_channelled(flights_[i].second);
    flights_[i] = flights_.back();
    flights_.pop_back();
    n_flights_.fetch_sub(1, std::memory_order_release);
    any = true;
  }
  return any;
}

void Rendezvous::serve_ready(const Ready& r, int from) {
  transport::Segment seg;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = channelled_segs_.find(r.seq);
    if (it == channelled_segs_.end() || r.bytes > it->second.size) {
      LOOM_LOG(kError, kTransport, "rank %d asked for message %llu, which is not lent", from,
               static_cast<unsigned long long>(r.seq));
      return;
    }
    seg = it->second;
  }
  if (r.flags & kReadyDrop) {
    release_channelled(r.seq);
    return;
  }
  wait_packed(r.seq);
  auto t = channel_->start_send(from, seg.ptr, static_cast<size_t>(r.bytes));
  LOOM_DEBUG(kTransport, "channel: sending message %llu to rank %d",
             static_cast<unsigned long long>(r.seq), from);
  if (!t) {
    LOOM_LOG(kError, kTransport, "channel send to rank %d: %s", from, t.status().message().c_str());
    release_channelled(r.seq);
    return;
  }
  channelled_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(flights_mu_);
  flights_.emplace_back(t.value(), r.seq);
  n_flights_.fetch_add(1, std::memory_order_release);
}

void Rendezvous::release_channelled(uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = channelled_segs_.find(seq);
  if (it == channelled_segs_.end()) return;
  mem_->release(it->second);
  channelled_segs_.erase(it);
  n_channelled_.fetch_sub(1, std::memory_order_release);
}

void Rendezvous::stop_serving() {
  {
    std::lock_guard<std::mutex> lk(serve_mu_);
    stop_ = true;
    serve_cv_.notify_one();
  }
  if (server_.joinable()) server_.join();
}

Status Rendezvous::lend_user(const void* data, size_t bytes, int to, Header* hdr,
                             MPI_Request* ack) {
  // A process cannot open its own IPC handles: messages to itself go
  // through a segment (Rendezvous::open finds it by sequence number).
  if (to == world_rank_) return Status(Err::kUnsupported, "zero-copy to this process itself");
  // Deferred packs stay deferred: a burst mixing lent and packed messages
  // (a halo's corners) would otherwise launch them one send at a time.
  progress(/*flush=*/false);
  return lend_region(data, bytes, bytes, 0, to, hdr, ack);
}

Status Rendezvous::lend_typed(const transport::Message& m, const void* user, int to, Header* hdr,
                              MPI_Request* ack) {
  if (to == world_rank_) return Status(Err::kUnsupported, "zero-copy to this process itself");
  if (m.bytes <= 0 || !m.form) return Status(Err::kUnsupported, "an empty message");
  std::unique_lock<std::mutex> lk(layout_mu_);
  auto key = std::make_tuple(m.form.get(), m.count, m.extent);
  auto it = sent_layouts_.find(key);
  if (it == sent_layouts_.end()) {
    if (sent_layouts_.size() >= kMaxLayouts)
      return Status(Err::kUnsupported, "this rank has lent messages of too many layouts");
    SentLayout s;
    s.form = m.form;
    const transport::Span sp = transport::message_span(m);
    s.lo = sp.lo;
    s.span = sp.size();
    LayoutWire w;
    w.id = next_layout_;
    s.wire.resize(sizeof w);
    std::memcpy(s.wire.data(), &w, sizeof w);
    if (!transport::encode_message(m, &s.wire, kMaxLayoutBytes))
      return Status(Err::kUnsupported, "the layout is too long to send ahead");
    s.id = next_layout_++;
    s.sent_to.assign(node_of_.size(), false);
    it = sent_layouts_.emplace(key, std::move(s)).first;
  }
  SentLayout& s = it->second;
  progress(/*flush=*/false);  // as lend_user
  Status st = lend_region(static_cast<const char*>(user) + s.lo, static_cast<size_t>(s.span),
                          static_cast<uint64_t>(m.bytes), s.id, to, hdr, ack);
  if (st) lent_typed_.fetch_add(1, std::memory_order_relaxed);
  if (!st || s.sent_to[static_cast<size_t>(to)]) return st;
  // Small enough to go eagerly: the send returns before the receiver looks.
  // Ahead of the header, so the receiver finds it waiting when it needs it.
  if (PMPI_Send(s.wire.data(), static_cast<int>(s.wire.size()), MPI_BYTE, to, kLayoutTag, ctrl_) !=
      MPI_SUCCESS) {
    PMPI_Cancel(ack);
    PMPI_Wait(ack, MPI_STATUS_IGNORE);
    acked(hdr->seq);
    return Status(Err::kMpi, "sending a zero-copy layout");
  }
  s.sent_to[static_cast<size_t>(to)] = true;
  return Status::ok();
}

Result<const transport::Message*> Rendezvous::sender_layout(const Header& h, int64_t* lo) {
  std::lock_guard<std::mutex> lk(layout_mu_);
  const auto key = std::make_pair(h.sender, h.layout);
  // Layouts from one sender arrive in the order it sent them: those before
  // the one wanted are kept for later headers.
  while (peer_layouts_.find(key) == peer_layouts_.end()) {
    MPI_Status st;
    if (PMPI_Probe(h.sender, kLayoutTag, ctrl_, &st) != MPI_SUCCESS)
      return Status(Err::kMpi, "probing for a zero-copy layout");
    int n = 0;
    PMPI_Get_count(&st, MPI_BYTE, &n);
    std::vector<unsigned char> buf(static_cast<size_t>(std::max(n, 0)));
    PMPI_Recv(buf.data(), n, MPI_BYTE, h.sender, kLayoutTag, ctrl_, MPI_STATUS_IGNORE);
    LayoutWire w;
    if (buf.size() < sizeof w) return Status(Err::kInvalidArg, "a zero-copy layout too short");
    std::memcpy(&w, buf.data(), sizeof w);
    auto pm = transport::decode_message(buf.data() + sizeof w, buf.size() - sizeof w);
    if (!pm)
      LOOM_LOG(kError, kTransport, "rank %d sent a zero-copy layout that is none: %s", h.sender,
               pm.status().message().c_str());
    // Kept either way: a later header naming it fails below, not here.
    peer_layouts_[std::make_pair(h.sender, w.id)] =
        pm ? std::move(pm.value()) : std::make_unique<transport::PeerMessage>();
  }
  const transport::PeerMessage& pl = *peer_layouts_[key];
  if (!pl.m.form || static_cast<int64_t>(h.bytes) != pl.m.bytes ||
      h.offset + static_cast<uint64_t>(pl.span) > h.handle.size)
    return Status(Err::kInvalidArg, "a zero-copy message does not fit its layout");
  if (lo) *lo = pl.lo;
  return &pl.m;
}

Status Rendezvous::lend_region(const void* data, size_t span, uint64_t packed, uint32_t layout,
                               int to, Header* hdr, MPI_Request* ack) {
  stats::Scope phase(stats::kLendRegion);
  auto ex = mem_->export_user(data, span);
  if (!ex) return ex.status();
  *hdr = new_header(kZeroCopy, next_seq_.fetch_add(1), packed);
  hdr->layout = layout;
  hdr->offset = ex->offset;
  hdr->handle = ex->handle;
  hdr->check = checksum(*hdr);
  if (ex->copy.ptr) {
    std::lock_guard<std::mutex> lk(mu_);
    copies_.emplace(hdr->seq, ex->copy);
  }
  // The ack carries no data the sender needs: its seq is checked by the tag.
  if (PMPI_Irecv(nullptr, 0, MPI_BYTE, to, zero_tag(hdr->seq, zc_tags_), ctrl_, ack) !=
      MPI_SUCCESS) {
    acked(hdr->seq);
    return Status(Err::kMpi, "posting the receive of a zero-copy ack");
  }
  return Status::ok();
}

void Rendezvous::acked(uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = copies_.find(seq);
  if (it == copies_.end()) return;
  mem_->release(it->second);
  copies_.erase(it);
}

bool Rendezvous::is_header(const void* p, size_t n, Header* out) const {
  if (!p || !may_be_header(n)) return false;
  if (n < static_cast<size_t>(kHeaderBytes)) {  // a SmallHeader: the message's own length
    SmallHeader sh;
    std::memcpy(&sh, p, sizeof sh);
    if (sh.magic != kSmallMagic || sh.nonce != nonce_ || sh.check != small_checksum(sh) ||
        sh.bytes != n)
      return false;
    transport::PeerHandle slab;
    if (!peer_slab(sh.sender, &slab) || uint64_t{sh.offset} + sh.bytes > slab.size) return false;
    *out = Header{};
    out->magic = kMagic;
    out->nonce = sh.nonce;
    out->seq = sh.seq;
    out->sender = sh.sender;
    out->kind = kSegment;
    out->bytes = sh.bytes;
    out->offset = sh.offset;
    out->handle = slab;
    out->check = checksum(*out);
    return true;
  }
  std::memcpy(out, p, sizeof(Header));
  if (out->magic != kMagic || out->nonce != nonce_ || out->check != checksum(*out)) return false;
  if (out->kind == kChunks) return out->offset > 0 && out->offset <= (uint64_t{1} << 30);
  if (out->kind == kZeroCopy && !zc_tags_) return false;
  if (out->kind == kZeroCopy && out->layout)  // the span is checked with the layout
    return mem_ && out->offset <= out->handle.size;
  if (out->kind == kChannel) return channel_ != nullptr;
  return (out->kind == kSegment || out->kind == kZeroCopy) && mem_ &&
         out->offset + out->bytes <= out->handle.size;
}

bool Rendezvous::packed(uint64_t seq) const {
  return !flags_ || flags_->own_ready(seq);
}

int64_t Rendezvous::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Rendezvous::flush_packs() {
  if (n_deferred_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lk(pack_mu_);
  flush_packs_locked();
}

void Rendezvous::flush_packs_locked() {
  if (deferred_.empty()) return;
  std::vector<Deferred> all;
  all.swap(deferred_);
  n_deferred_.store(0, std::memory_order_release);
  LOOM_DEBUG(kTransport, "packs: %zu deferred go now", all.size());
  for (size_t a = 0; a < all.size();) {  // runs of one mover, in order
    size_t b = a;
    std::vector<transport::Mover::PackSignal> jobs;
    for (; b < all.size() && all[b].mover == all[a].mover; ++b) jobs.push_back(all[b].job);
    if (Status s = all[a].mover->pack_signal_many(jobs); !s) {
      // Their headers are out: each goes alone, and a pack that cannot
      // run still writes its word, so no receiver waits forever.
      LOOM_LOG(kError, kTransport, "batched packs failed (%s); packing one by one",
               s.message().c_str());
      for (const auto& j : jobs)
        if (Status one = all[a].mover->pack_signal(j.m, j.user, j.dst, j.word, j.value); !one) {
          LOOM_LOG(kError, kTransport, "pack of message %u failed: %s", j.value,
                   one.message().c_str());
          reinterpret_cast<std::atomic<uint32_t>*>(j.word)->store(j.value,
                                                                  std::memory_order_release);
        }
    }
    a = b;
  }
}

void Rendezvous::flusher() {
  std::unique_lock<std::mutex> lk(flush_mu_);
  for (;;) {
    flush_cv_.wait(lk, [&] { return flush_stop_ || n_deferred_.load() != 0; });
    if (flush_stop_) return;
    // Once no send has deferred a pack for kFlushAfterUs: a burst of sends
    // goes on batching, and a completion call usually comes first and
    // finds nothing left.
    for (;;) {
      const int64_t idle = now_ns() - last_defer_ns_.load(std::memory_order_relaxed);
      if (idle >= int64_t{kFlushAfterUs} * 1000) break;
      flush_cv_.wait_for(lk, std::chrono::nanoseconds(int64_t{kFlushAfterUs} * 1000 - idle),
                         [&] { return flush_stop_; });
      if (flush_stop_) return;
    }
    lk.unlock();
    flush_packs();
    lk.lock();
  }
}

void Rendezvous::stop_flushing() {
  flush_packs();
  {
    std::lock_guard<std::mutex> lk(flush_mu_);
    flush_stop_ = true;
    flush_cv_.notify_one();
  }
  if (flusher_.joinable()) flusher_.join();
}

void Rendezvous::wait_packed(uint64_t seq) {
  if (packed(seq)) return;
  flush_packs();
  stats::Scope phase(stats::kWaitPacked);
  for (int i = 0; !packed(seq); ++i)  // the GPU is at it: microseconds
    if (i > 64) std::this_thread::yield();
}

Result<Rendezvous::Source> Rendezvous::open(const Header& h, bool wait) {
  const void* base = nullptr;
  const transport::Message* layout = nullptr;
  int device = -1;
  if (h.sender == world_rank_ && h.kind == kSegment) {  // a message to itself: its own segment
    std::lock_guard<std::mutex> lk(mu_);
    auto it = lent_.find(h.seq);
    if (it != lent_.end())
      base = it->second.ptr;
    else if (arena_lent_.count(h.seq))
      base = arena_seg_.ptr;
    else if (slab_lent_.count(h.seq))
      base = slab_seg_.ptr;
    else
      return Status(Err::kInvalidArg, "own segment not lent");
  } else if (h.kind == kZeroCopy) {  // the sender's own buffer: in use until the ack
    int64_t lo = 0;
    if (h.layout) {  // where the sender's user pointer maps, to read its layout from
      auto l = sender_layout(h, &lo);
      if (!l) return l.status();
      layout = l.value();
    }
    auto b = mem_->open_user(h.handle, h.sender, 0);
    if (!b) return b.status();
    base = static_cast<const char*>(b.value()) - lo;
    std::lock_guard<std::mutex> lk(mu_);
    zc_open_.emplace(std::make_pair(h.sender, h.seq), h.handle);
  } else {
    auto b = mem_->open(h.handle, h.sender, &device);
    if (!b) return b.status();
    base = b.value();
  }
  Source src{static_cast<const char*>(base) + h.offset, layout, device};
  if (h.kind == kSegment && flags_) {
    if (wait) {
      LOOM_TRY(wait_ready(h));
    } else {
      auto ready = flags_->peer_ready(h.sender, h.seq);
      if (!ready) return ready.status();
      if (!ready.value()) {
        auto w = flags_->peer_word(h.sender, h.seq);
        if (!w) return w.status();
        src.ready_word = w.value();
        src.ready_value = static_cast<uint32_t>(h.seq);
      }
    }
  }
  pulled_.fetch_add(1, std::memory_order_relaxed);
  return src;
}

Status Rendezvous::wait_ready(const Header& h) {
  if (h.kind != kSegment || !flags_) return Status::ok();
  // The sender enqueued the pack before it sent the header, so this ends
  // without any action of the sender's host thread.
  stats::Scope phase(stats::kReadyWait);
  std::chrono::steady_clock::time_point t0;  // read once the word is found unset
  bool warned = false;
  for (int i = 0;; ++i) {
    auto ready = flags_->peer_ready(h.sender, h.seq);
    if (!ready) return ready.status();
    if (ready.value()) return Status::ok();
    if (i == 0) t0 = std::chrono::steady_clock::now();
    if (i > 64) std::this_thread::yield();
    if (!warned && (i & 0xffff) == 0 && i > 0 &&
        std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      LOOM_WARN(kTransport, "still waiting for rank %d's pack of message %llu after 10 s", h.sender,
                static_cast<unsigned long long>(h.seq));
      warned = true;
    }
  }
}

namespace {
// Drops the entries of v that done() says are complete (order not kept),
// counting them off n.
template <class V, class Done>
void drop_done(V& v, std::atomic<size_t>& n, Done done) {
  for (size_t i = 0; i < v.size();) {
    if (!done(v[i])) {
      ++i;
      continue;
    }
    v[i] = std::move(v.back());
    v.pop_back();
    n.fetch_sub(1, std::memory_order_release);
  }
}
}  // namespace

void Rendezvous::send_ack(std::unique_ptr<AckOut> a, int to) {
  if (PMPI_Isend(a->seqs.data(), static_cast<int>(a->seqs.size()), MPI_UINT64_T, to, kAckTag, ctrl_,
                 &a->req) != MPI_SUCCESS) {
    LOOM_LOG(kError, kTransport, "segment acks to rank %d could not be sent", to);
    return;
  }
  int done = 0;
  PMPI_Test(&a->req, &done, MPI_STATUS_IGNORE);  // most go at once
  if (done) return;
  std::lock_guard<std::mutex> lk(acks_mu_);
  acks_out_.push_back(std::move(a));
  n_acks_out_.fetch_add(1, std::memory_order_release);
}

void Rendezvous::test_acks() {
  if (n_acks_out_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lk(acks_mu_);
  drop_done(acks_out_, n_acks_out_, [](std::unique_ptr<AckOut>& a) {
    int done = 0;
    PMPI_Test(&a->req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

void Rendezvous::ack(const Header& h) {
  // Blocking: a zero-copy sender's request, or a channel's transfer, waits
  // for this message, so it must have left before the caller goes back to
  // the user (a queued send moves only when this rank next calls the MPI).
  if (h.kind == kChannel) {
    Ready r;
    r.seq = h.seq;
    r.flags = kReadyDrop;
    PMPI_Send(&r, sizeof r, MPI_BYTE, h.sender, kReadyTag, ctrl_);
  } else if (h.kind == kZeroCopy) {
    // Read (or never opened): the mapping is idle again, droppable once freed.
    std::optional<transport::PeerHandle> opened;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = zc_open_.find(std::make_pair(h.sender, h.seq));
      if (it != zc_open_.end()) {
        opened = it->second;
        zc_open_.erase(it);
      }
    }
    if (opened) mem_->done_user(*opened);
    PMPI_Send(nullptr, 0, MPI_BYTE, h.sender, zero_tag(h.seq, zc_tags_), ctrl_);
  } else {
    PMPI_Send(&h.seq, 1, MPI_UINT64_T, h.sender, kAckTag, ctrl_);
  }
}

void Rendezvous::ack_all(const std::vector<const Header*>& hs) {
  std::map<int, std::vector<uint64_t>> by_sender;  // segments: one message a sender
  for (const Header* h : hs) {
    if (h->kind == kSegment)
      by_sender[h->sender].push_back(h->seq);
    else
      ack(*h);
  }
  // At most 1 KiB a message (the sender receives a probed count). Segment
  // acks need not have left when this returns: the sender only reuses the
  // memory sooner (a lend that finds none stages its message instead).
  constexpr size_t kMaxAcks = 128;
  for (auto& [to, seqs] : by_sender)
    for (size_t i = 0; i < seqs.size(); i += kMaxAcks) {
      auto a = std::make_unique<AckOut>();
      a->seqs.assign(
          seqs.begin() + static_cast<std::ptrdiff_t>(i),
          seqs.begin() + static_cast<std::ptrdiff_t>(std::min(seqs.size(), i + kMaxAcks)));
      send_ack(std::move(a), to);
    }
}

void Rendezvous::ack_if_truncated_header(const void* p, size_t n) {
  Header h;
  if (!p) return;
  SmallHeader sh;  // its first 24 bytes name the sender and the sequence number
  if (slabs_on_ && n >= offsetof(SmallHeader, offset)) {
    std::memcpy(static_cast<void*>(&sh), p, offsetof(SmallHeader, offset));
    if (sh.magic == kSmallMagic && sh.nonce == nonce_ && sh.sender >= 0 &&
        static_cast<size_t>(sh.sender) < node_of_.size() && sh.sender != world_rank_) {
      h.kind = kSegment;
      h.sender = sh.sender;
      h.seq = sh.seq;
      ack(h);
      return;
    }
  }
  if (n < offsetof(Header, bytes)) return;
  std::memcpy(static_cast<void*>(&h), p, offsetof(Header, bytes));
  if (h.magic != kMagic || h.nonce != nonce_ || h.sender < 0 ||
      static_cast<size_t>(h.sender) >= node_of_.size() || h.sender == world_rank_)
    return;
  if (h.kind == kSegment || (h.kind == kZeroCopy && zc_tags_) || (h.kind == kChannel && channel_)) {
    ack(h);
  } else {  // its chunks are never received: the sender gives up on them at finalize
    LOOM_WARN(kTransport,
              "a pipelined message's header was truncated by the MPI; its chunks "
              "stay unreceived");
  }
}

void Rendezvous::progress(bool flush, bool throttled) {
  if (flush) flush_packs();
  // The sender's thread does this too; here it shows in the caller's view at once.
  if (n_channelled_.load(std::memory_order_acquire) != 0) serve_readies();
  land_flights();
  test_acks();
  if (n_sending_.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lk(mu_);
    drop_done(sending_, n_sending_, [](Sending& out) {
      int done = 0;
      PMPI_Testall(static_cast<int>(out.reqs.size()), out.reqs.data(), &done, MPI_STATUSES_IGNORE);
      return done != 0;
    });
  }
  poll_acks(throttled || !flush);
}

void Rendezvous::poll_acks(bool throttled) {
  if (n_lent_.load(std::memory_order_acquire) == 0) return;
  const int64_t now = now_ns();
  if (throttled && now - acks_polled_ns_.load(std::memory_order_relaxed) < kAckPollGapNs) return;
  acks_polled_ns_.store(now, std::memory_order_relaxed);
  stats::Scope phase(stats::kProgress);
  std::lock_guard<std::mutex> lk(mu_);
  if (!acked_unpacked_.empty()) {  // early sends acked before their pack was written
    std::vector<uint64_t> retry;
    retry.swap(acked_unpacked_);
    for (uint64_t seq : retry) release_arena_block(seq);
  }
  for (;;) {
    int flag = 0;
    MPI_Status st;
    PMPI_Iprobe(MPI_ANY_SOURCE, kAckTag, ctrl_, &flag, &st);
    if (!flag) return;
    for (uint64_t seq : recv_acks(st)) {
      if (release_arena_block(seq)) continue;
      auto it = lent_.find(seq);
      if (it == lent_.end()) {
        LOOM_LOG(kError, kTransport, "ack for segment %llu, which is not lent",
                 static_cast<unsigned long long>(seq));
        continue;
      }
      mem_->release(it->second);
      lent_.erase(it);
      n_lent_.fetch_sub(1, std::memory_order_release);
    }
  }
}

std::vector<uint64_t> Rendezvous::recv_acks(const MPI_Status& probed) {
  int n = 0;
  PMPI_Get_count(&probed, MPI_UINT64_T, &n);
  std::vector<uint64_t> seqs(static_cast<size_t>(std::max(n, 0)));
  PMPI_Recv(seqs.data(), n, MPI_UINT64_T, probed.MPI_SOURCE, kAckTag, ctrl_, MPI_STATUS_IGNORE);
  return seqs;
}

void Rendezvous::shutdown() {
  if (down_) return;
  down_ = true;
  stop_flushing();
  progress();
  {  // queued segment acks: their senders reuse the memory once they come
    std::lock_guard<std::mutex> lk(acks_mu_);
    for (auto& a : acks_out_) PMPI_Wait(&a->req, MPI_STATUS_IGNORE);
    acks_out_.clear();
    n_acks_out_.store(0);
  }
  // Every receive has completed before MPI_Finalize, so past this barrier
  // no peer reads our segments, whether or not its ack has arrived yet
  // (channel transfers: the sender's thread served them before it).
  PMPI_Barrier(ctrl_);
  stop_serving();
  // Every chunk was received by now in a correct program; a header the MPI
  // truncated leaves its chunks unreceived, so this does not wait forever.
  for (int i = 0; i < 20000 && n_sending_.load() != 0; ++i) {
    progress();
    if (n_sending_.load() != 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!sending_.empty())
      LOOM_WARN(kTransport, "finalize: %zu pipelined messages were never received",
                sending_.size());
    for (auto& s : sending_)
      for (auto& r : s.reqs)
        if (r != MPI_REQUEST_NULL) PMPI_Request_free(&r);
    sending_.clear();
    n_sending_.store(0);
    if (!lent_.empty())
      LOOM_DEBUG(kTransport, "finalize: %zu segments lent without an ack yet", lent_.size());
    for (auto& [seq, seg] : lent_) {
      wait_packed(seq);  // an unread message's pack may still be writing it
      if (mem_) mem_->release(seg);
    }
    lent_.clear();
    arena_lent_.clear();
    early_lent_.clear();
    acked_unpacked_.clear();
    for (auto& [seq, block] : slab_lent_) wait_packed(seq);  // as lent_'s
    slab_lent_.clear();
    slab_live_.store(nullptr, std::memory_order_release);
    if (slab_ && mem_) mem_->release(slab_seg_);
    slab_.reset();
    arena_live_.store(nullptr, std::memory_order_release);
    if (arena_ && mem_) mem_->release(arena_seg_);
    arena_.reset();
    for (auto& [seq, seg] : copies_)
      if (mem_) mem_->release(seg);
    copies_.clear();
    if (!channelled_segs_.empty())
      LOOM_DEBUG(kTransport, "finalize: %zu messages never asked for by the channel",
                 channelled_segs_.size());
    for (auto& [seq, seg] : channelled_segs_) {
      wait_packed(seq);
      if (mem_) mem_->release(seg);
    }
    channelled_segs_.clear();
    n_channelled_.store(0);
    n_lent_.store(0);
  }
  if (channel_) channel_->shutdown();
  if (mem_) mem_->unmap_all();
  PMPI_Barrier(ctrl_);  // nobody maps our segments any more
  if (mem_) mem_->free_all();
  if (flags_) flags_->unlink();
  if (!slab_page_.empty()) transport::shared_page_unlink(slab_page_);
  for (;;) {  // acks still in flight
    int flag = 0;
    MPI_Status st;
    PMPI_Iprobe(MPI_ANY_SOURCE, kAckTag, ctrl_, &flag, &st);
    if (!flag) break;
    recv_acks(st);
  }
  PMPI_Comm_free(&ctrl_);
  PMPI_Comm_free_keyval(&keyval_);
}

size_t Rendezvous::bytes_lent() const {
  if (!mem_) return 0;
  // The slab is held for good: only its blocks lent count.
  const transport::Arena* sl = slab();
  const size_t slab = sl ? slab_seg_.size : 0;
  const size_t blocks = sl ? sl->size() - sl->free_bytes() : 0;
  return mem_->bytes_in_use() - std::min(slab, mem_->bytes_in_use()) + blocks;
}

}  // namespace loom::transport
