#include "transport/mover.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <thread>

#include "pack/host_engine.hpp"
#include "type/canonical.hpp"
#include "util/knobs.hpp"

namespace loom::transport {

const char* method_name(Method m) {
  switch (m) {
    case Method::kHost:
      return "host";
    case Method::kOneShot:
      return "oneshot";
    case Method::kStaged:
      return "staged";
    case Method::kDevice:
      return "device";
  }
  return "?";
}

Result<pack::LayoutView> message_view(const Message& m, pack::Layout& owned) {
  auto v = pack::repeat_view(*m.one, m.count, m.extent);
  if (v || v.status().code() != Err::kUnsupported) return v;
  auto l = pack::make_layout(type::repeat(m.form, m.count, m.extent));
  if (!l) return l.status();
  owned = std::move(l.value());
  return owned.view();
}

std::vector<pack::Block> partial_runs(const Message& m, int64_t index, int64_t bytes) {
  std::vector<pack::Block> runs;
  const pack::LayoutView v = m.one->view();
  const int64_t base = index * m.extent;
  for (int64_t p = 0; p < bytes; ++p) {
    int64_t off = base + pack::packed_to_offset(v, p);
    if (!runs.empty() && runs.back().off + runs.back().len == off)
      ++runs.back().len;
    else
      runs.push_back({off, 1});
  }
  return runs;
}

ReservedPool::~ReservedPool() {
  for (auto& [cls, list] : free_)
    for (void* p : list) munmap(p, cls);
}

Result<Staged> ReservedPool::stage(size_t bytes) {
  Staged s;
  s.bytes = bytes;
  if (bytes == 0) return s;
  size_t cls = 4096;
  while (cls < bytes) cls <<= 1;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= cls;
    }
  }
  if (!p) {
    p = mmap(nullptr, cls, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
             0);
    if (p == MAP_FAILED) return Status(Err::kNoMemory, "reserving receive staging");
  }
  s.host = p;
  s.hold = std::shared_ptr<void>(p, [this, cls](void* q) { put_back(q, cls); });
  return s;
}

void ReservedPool::put_back(void* p, size_t cls) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (cached_ + cls <= kMaxCached) {
      free_[cls].push_back(p);
      cached_ += cls;
      return;
    }
  }
  munmap(p, cls);
}

bool contiguous_at(const Message& m, int64_t* base) {
  if (!m.one || m.one->kind != pack::LayoutKind::kContiguous) return false;
  if (m.count > 1 && m.extent != m.one->total) return false;
  if (base) *base = m.one->base;
  return true;
}

Span message_span(const Message& m) {
  Span s;
  if (!m.form || m.count == 0) return s;
  const int64_t shift = (m.count - 1) * m.extent;
  s.lo = m.form->disp + m.form->lo + std::min<int64_t>(0, shift);
  s.hi = m.form->disp + m.form->hi + std::max<int64_t>(0, shift);
  return s;
}

Status host_unpack_received(const Message& m, const void* packed, size_t received, void* user) {
  const int64_t size = m.count ? m.bytes / m.count : 0;
  if (size == 0 || received == 0) return Status::ok();
  Message whole = m;
  whole.count = static_cast<int64_t>(received) / size;
  whole.bytes = whole.count * size;
  pack::Layout owned;
  auto v = message_view(whole, owned);
  if (!v) return v.status();
  pack::host_unpack(*v, packed, user);
  const char* tail = static_cast<const char*>(packed) + whole.bytes;
  for (const auto& r : partial_runs(m, whole.count, static_cast<int64_t>(received) - whole.bytes)) {
    std::memcpy(static_cast<char*>(user) + r.off, tail, r.len);
    tail += r.len;
  }
  return Status::ok();
}

Status Mover::unpack_from_layout(const Message& m, const Message& from, const void* src,
                                 size_t received, void* user) {
  if (received == 0 || from.bytes == 0) return Status::ok();
  auto s = scratch(static_cast<size_t>(from.bytes));
  if (!s) return s.status();
  LOOM_TRY(pack_to(from, src, s->dev));
  return unpack_from(m, s->dev, received, user);
}

Status Mover::pack_signal(const Message& m, const void* user, void* dst, uint32_t* word,
                          uint32_t value) {
  LOOM_TRY(pack_to(m, user, dst));
  reinterpret_cast<std::atomic<uint32_t>*>(word)->store(value, std::memory_order_release);
  return Status::ok();
}

Status Mover::pack_signal_many(const std::vector<PackSignal>& jobs) {
  for (const PackSignal& j : jobs) LOOM_TRY(pack_signal(j.m, j.user, j.dst, j.word, j.value));
  return Status::ok();
}

Status Mover::unpack_batch(const Message& m, const std::vector<const void*>& src,
                           const std::vector<void*>& dst, size_t bytes) {
  for (size_t i = 0; i < src.size(); ++i) LOOM_TRY(unpack_from(m, src[i], bytes, dst[i]));
  return Status::ok();
}

namespace {

class HostMover final : public Mover {
 public:
  Method method() const override { return Method::kHost; }

  Result<Staged> pack(const Message& m, const void* user) override {
    auto s = stage(static_cast<size_t>(m.bytes));
    if (!s) return s;
    LOOM_TRY(pack_to(m, user, s->host));
    return s;
  }

  Result<Staged> stage(size_t bytes) override {
    Staged s;
    s.bytes = bytes;
    if (bytes == 0) return s;
    auto buf = std::shared_ptr<char[]>(new (std::nothrow) char[bytes]);
    if (!buf) return Status(Err::kNoMemory, "host staging");
    s.host = buf.get();
    in_use_ += bytes;
    auto* self = this;
    s.hold =
        std::shared_ptr<void>(buf.get(), [buf, bytes, self](void*) { self->in_use_ -= bytes; });
    return s;
  }

  Status unpack(const Message& m, const Staged& s, size_t received, void* user) override {
    return host_unpack_received(m, s.host, received, user);
  }

  Status pack_to(const Message& m, const void* user, void* dst) override {
    pack::Layout owned;
    auto v = message_view(m, owned);
    if (!v) return v.status();
    pack::host_pack(*v, user, dst);
    return Status::ok();
  }
  Status unpack_from(const Message& m, const void* src, size_t received, void* user) override {
    return host_unpack_received(m, src, received, user);
  }

  // LOOM_TEST_PACK_DELAY_US: the pack runs later, in order, on a worker
  // thread, then writes the word, as a GPU stream would.
  Status pack_signal(const Message& m, const void* user, void* dst, uint32_t* word,
                     uint32_t value) override {
    if (delay_us_ <= 0) return Mover::pack_signal(m, user, dst, word, value);
    auto job = std::make_unique<Delayed>();
    auto l = pack::make_layout(type::repeat(m.form, m.count, m.extent));
    if (!l) return l.status();
    job->layout = std::move(l.value());
    job->user = user;
    job->dst = dst;
    job->word = word;
    job->value = value;
    job->due = std::chrono::steady_clock::now() + std::chrono::microseconds(delay_us_);
    std::lock_guard<std::mutex> lk(delay_mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { run_delayed(); });
    delayed_.push_back(std::move(job));
    delay_cv_.notify_one();
    return Status::ok();
  }
  ~HostMover() override {
    {
      std::lock_guard<std::mutex> lk(delay_mu_);
      stop_ = true;
      delay_cv_.notify_one();
    }
    if (worker_.joinable()) worker_.join();
  }

  Status copy_to_host(void* host, const void* user, size_t bytes) override {
    std::memcpy(host, user, bytes);
    return Status::ok();
  }
  Status copy_from_host(void* user, const void* host, size_t bytes) override {
    std::memcpy(user, host, bytes);
    return Status::ok();
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  size_t bytes_in_use() const override { return in_use_.load(); }

 private:
  struct Delayed {
    pack::Layout layout;
    const void* user = nullptr;
    void* dst = nullptr;
    uint32_t* word = nullptr;
    uint32_t value = 0;
    std::chrono::steady_clock::time_point due;
  };
  void run_delayed() {
    std::unique_lock<std::mutex> lk(delay_mu_);
    for (;;) {
      delay_cv_.wait(lk, [this] { return stop_ || !delayed_.empty(); });
      if (delayed_.empty()) return;  // stopping, nothing left
      std::unique_ptr<Delayed> j = std::move(delayed_.front());
      delayed_.pop_front();
      lk.unlock();
      std::this_thread::sleep_until(j->due);
      pack::host_pack(j->layout.view(), j->user, j->dst);
      reinterpret_cast<std::atomic<uint32_t>*>(j->word)->store(j->value, std::memory_order_release);
      lk.lock();
    }
  }

  std::atomic<size_t> in_use_{0};
  const long delay_us_ = std::atol(knobs().test_pack_delay_us.c_str());
  std::mutex delay_mu_;
  std::condition_variable delay_cv_;
  std::deque<std::unique_ptr<Delayed>> delayed_;
  std::thread worker_;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<Mover> make_host_mover() {
  return std::make_unique<HostMover>();
}

#ifndef LOOM_HAVE_CUDA
Result<std::unique_ptr<Mover>> make_gpu_mover(Method, bool, pack::ProxyQueue*, size_t) {
  return Status(Err::kUnsupported, "Loom was built without CUDA");
}
#endif

Result<Staged> Mover::pack_chunked(const Message& m, const void* user, size_t chunk,
                                   const ChunkReady& ready, const std::function<void()>&,
                                   Staged* keep) {
  auto s = pack(m, user);
  if (!s) return s;
  if (keep) *keep = *s;
  for (size_t off = 0; off < s->bytes; off += chunk)
    LOOM_TRY(ready(off, std::min(chunk, s->bytes - off), s->host));
  return s;
}

Status Mover::unpack_chunked(const Message& m, const Staged& s, size_t received, size_t chunk,
                             const ChunkArrived& arrived, void* user) {
  for (size_t off = 0; off < received; off += chunk)
    LOOM_TRY(arrived(off, std::min(chunk, received - off)));
  return unpack(m, s, received, user);
}

}  // namespace loom::transport
