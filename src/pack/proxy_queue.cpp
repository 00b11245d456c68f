#include "pack/proxy_queue.hpp"

#include <chrono>
#include <thread>

namespace loom::pack {
namespace {

uint64_t load(uint64_t* p, std::memory_order o = std::memory_order_acquire) {
  return std::atomic_ref<uint64_t>(*p).load(o);
}
uint32_t load32(uint32_t* p) {
  return std::atomic_ref<uint32_t>(*p).load(std::memory_order_seq_cst);
}
void store32(uint32_t* p, uint32_t v) {
  std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_seq_cst);
}

}  // namespace

ProxyQueue::ProxyQueue(std::unique_ptr<ProxyAgent> agent, uint64_t idle_ns)
    : agent_(std::move(agent)), ctl_(agent_->ctl()), ring_(agent_->ring()), idle_ns_(idle_ns) {}

ProxyQueue::~ProxyQueue() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!launched_) return;
  store32(&ctl_->stop, 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (agent_->run() == ProxyAgent::Run::kRunning && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
}

uint64_t ProxyQueue::done() const {
  return load(&ctl_->tail);
}

Status ProxyQueue::ensure_running() {
  for (;;) {
    if (load32(&ctl_->state) == 1) return Status::ok();
    if (launched_) {
      // Leaving, or gone: it may still see the new request and stay.
      const ProxyAgent::Run r = agent_->run();
      if (r == ProxyAgent::Run::kRunning) {
        std::this_thread::yield();
        continue;
      }
      if (r == ProxyAgent::Run::kFailed) {
        failed_ = true;
        return Status(Err::kCuda, "copy agent: " + agent_->failure());
      }
    }
    store32(&ctl_->state, 1);
    Status s = agent_->launch(idle_ns_);
    if (!s) {
      store32(&ctl_->state, 0);
      failed_ = true;
      return s;
    }
    launched_ = true;
    launches_.fetch_add(1, std::memory_order_relaxed);
    return Status::ok();
  }
}

Result<uint64_t> ProxyQueue::post(void* dst, const void* src, size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (failed_) return Status(Err::kCuda, "copy agent failed before: " + agent_->failure());
  const uint64_t v[3] = {reinterpret_cast<uint64_t>(dst), reinterpret_cast<uint64_t>(src), bytes};
  for (uint64_t x : v)
    if (x >> kProxyValueBits) return Status(Err::kUnsupported, "copy agent: past 48 bits");
  while (head_ - done() >= kProxyRing) {  // full: the oldest must finish first
    LOOM_TRY(ensure_running());
    std::this_thread::yield();
  }
  ProxySlot& slot = ring_[head_ % kProxyRing];
  for (int i = 0; i < 3; ++i)
    std::atomic_ref<uint64_t>(slot.w[i]).store(proxy_word(v[i], head_ + 1),
                                               std::memory_order_release);
  ++head_;
  // The request before its count; then the full fence of the protocol
  // before looking at state.
  std::atomic_ref<uint64_t>(ctl_->head).store(head_, std::memory_order_seq_cst);
  if (load32(&ctl_->state) == 0) LOOM_TRY(ensure_running());
  return head_;
}

Status ProxyQueue::wait(uint64_t ticket) {
  for (uint32_t spins = 1; done() < ticket; ++spins) {
    if (spins % 4096 != 0) continue;
    // Now and then: has the agent failed, or left with the request undone
    // (it should not)?
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return Status(Err::kCuda, "copy agent: " + agent_->failure());
    const ProxyAgent::Run r = agent_->run();
    if (r == ProxyAgent::Run::kFailed) {
      failed_ = true;
      return Status(Err::kCuda, "copy agent: " + agent_->failure());
    }
    if (r == ProxyAgent::Run::kExited && done() < ticket) {
      rescues_.fetch_add(1, std::memory_order_relaxed);
      LOOM_TRY(ensure_running());
    }
  }
  return Status::ok();
}

Status ProxyQueue::copy(void* dst, const void* src, size_t bytes) {
  auto t = post(dst, src, bytes);
  if (!t) return t.status();
  return wait(t.value());
}

#ifndef LOOM_HAVE_CUDA
Result<std::unique_ptr<ProxyQueue>> make_gpu_proxy(uint64_t) {
  return Status(Err::kUnsupported, "built without CUDA");
}
#endif

}  // namespace loom::pack
