// The emulated stream and its lane; without CUDA, the CUDA lane's stand-ins.
#include "stream/lane.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "pack/host_engine.hpp"

namespace loom::stream {

HostStream::HostStream() : thread_([this] { run(); }) {}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HostStream::push(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void HostStream::synchronize() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [this] { return tasks_.empty() && !busy_; });
}

void HostStream::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and all work done
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lk.unlock();
    task();
    lk.lock();
    busy_ = false;
    if (tasks_.empty()) idle_cv_.notify_all();
  }
}

Status Lane::run_many(const LaneJob* jobs, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (jobs[i].from) return Status(Err::kUnsupported, "transfers run on CUDA streams only");
  for (size_t i = 0; i < n; ++i)
    LOOM_TRY(jobs[i].pack ? pack(*jobs[i].m, jobs[i].src, jobs[i].dst)
                          : unpack(*jobs[i].m, jobs[i].src, jobs[i].dst));
  return Status::ok();
}

Status Lane::run_many_write(const LaneJob* jobs, size_t n, uint32_t* word, uint32_t value) {
  LOOM_TRY(run_many(jobs, n));
  return write(word, value);
}

Status Lane::write_many(uint32_t* const* words, const uint32_t* values, size_t n) {
  for (size_t i = 0; i < n; ++i) LOOM_TRY(write(words[i], values[i]));
  return Status::ok();
}

Status Lane::wait_many(uint32_t* const* words, const uint32_t* values, size_t n, Writer by) {
  for (size_t i = 0; i < n; ++i) LOOM_TRY(wait(words[i], values[i], by));
  return Status::ok();
}

namespace {

// Spins politely: the emulated stream may share two cores with several ranks.
void wait_word(const uint32_t* word, uint32_t value) {
  const auto* w = reinterpret_cast<const std::atomic<uint32_t>*>(word);
  while (!reached(w->load(std::memory_order_acquire), value)) std::this_thread::yield();
}

class HostLane final : public Lane {
 public:
  explicit HostLane(HostStream* s) : s_(s) {}
  bool emulated() const override { return true; }

  Status write(uint32_t* word, uint32_t value) override {
    s_->push([word, value] {
      reinterpret_cast<std::atomic<uint32_t>*>(word)->store(value, std::memory_order_release);
    });
    return Status::ok();
  }
  Status wait(uint32_t* word, uint32_t value, Writer /*by*/) override {
    s_->push([word, value] { wait_word(word, value); });
    return Status::ok();
  }
  Status pack(const transport::Message& m, const void* user, void* packed) override {
    s_->push([m, user, packed] {
      pack::Layout owned;
      auto v = transport::message_view(m, owned);
      if (v) pack::host_pack(v.value(), user, packed);
    });
    return Status::ok();
  }
  Status unpack(const transport::Message& m, const void* packed, void* user) override {
    s_->push([m, packed, user] {
      pack::Layout owned;
      auto v = transport::message_view(m, owned);
      if (v) pack::host_unpack(v.value(), packed, user);
    });
    return Status::ok();
  }
  Status copy_in(void* block, const void* user, size_t bytes) override {
    s_->push([=] { std::memcpy(block, user, bytes); });
    return Status::ok();
  }
  Status copy_out(void* user, const void* block, size_t bytes) override {
    s_->push([=] { std::memcpy(user, block, bytes); });
    return Status::ok();
  }
  Status copy_from(const Landed* landed, void* dst, size_t max, const PullWaits& first) override {
    s_->push([=] {
      if (first.release) wait_word(first.release, first.value);
      const auto* l = reinterpret_cast<const volatile Landed*>(landed);
      if (const uint64_t w = l->wait_word; w && first.sender)
        wait_word(reinterpret_cast<const uint32_t*>(static_cast<uintptr_t>(w)),
                  static_cast<uint32_t>(l->wait_value));
      const uint64_t bytes = l->bytes, address = l->address;
      const uint64_t n = std::min<uint64_t>(bytes, max);
      if (n) std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(address)), n);
    });
    return Status::ok();
  }
  Status launch_host(void (*fn)(void*), void* arg) override {
    s_->push([fn, arg] { fn(arg); });
    return Status::ok();
  }
  Status synchronize() override {
    s_->synchronize();
    return Status::ok();
  }
  Result<Block> alloc(size_t bytes) override {
    Block b;
    b.bytes = bytes;
    // 64-byte aligned: flag words sit on cache lines of their own.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) return Status(Err::kNoMemory, "emulated stream memory");
    b.host = b.dev = p;
    b.hold = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    return b;
  }

 private:
  HostStream* s_;
};

}  // namespace

std::unique_ptr<Lane> make_host_lane(HostStream* s) {
  return std::make_unique<HostLane>(s);
}

#ifndef LOOM_HAVE_CUDA
Result<std::unique_ptr<Lane>> make_cuda_lane(void*) {
  return Status(Err::kUnsupported, "this Loom was built without CUDA: no CUDA streams");
}
Status cuda_synchronize(void*) {
  return Status(Err::kUnsupported, "this Loom was built without CUDA");
}
Status cuda_launch_host(void*, void (*)(void*), void*) {
  return Status(Err::kUnsupported, "this Loom was built without CUDA");
}
bool cuda_transfer_possible(const transport::Message&, const void*, const transport::Message&,
                            const void*) {
  return false;
}
Status cuda_attach_host_words(void*, size_t) {
  return Status(Err::kUnsupported, "this Loom was built without CUDA");
}
Result<void*> cuda_attach_ready_page(void*, size_t, bool) {
  return Status(Err::kUnsupported, "this Loom was built without CUDA");
}
void cuda_lanes_release() {}
#endif

}  // namespace loom::stream
