// A resident copy agent, host side. A copy posted here costs the host no CUDA
// call: the request goes into a ring in mapped pinned memory, a small kernel
// that stays on the GPU picks it up, copies with one block, and writes back
// how far it got. A synchronised copy of a few bytes otherwise costs a launch
// and a stream synchronisation (9-12 us on an H100 under MPS); here it costs
// a few trips over PCIe (4-6 us, docs/results/p2p-h100-proxy.md).
//
// The agent leaves after `idle` without requests, so an application's
// cudaDeviceSynchronize (or cudaFree) waits at most that long for it, and
// the next post launches it again. Protocol: pack/proxy_protocol.hpp.
//
// The agent reads and writes what the GPU can address: its own memory, a
// peer's memory mapped through CUDA IPC, mapped pinned host memory. Not
// pageable host memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "pack/proxy_protocol.hpp"
#include "util/status.hpp"

namespace loom::pack {

// What runs the requests: the kernel (pack/cuda/proxy.cu) or, in tests, a
// thread. It owns the shared memory.
class ProxyAgent {
 public:
  enum class Run { kRunning, kExited, kFailed };
  virtual ~ProxyAgent() = default;
  virtual ProxyCtl* ctl() = 0;    // zeroed at first
  virtual ProxySlot* ring() = 0;  // kProxyRing entries
  // Starts an agent that goes on from ctl()->tail and leaves after idle_ns
  // without requests (or at ctl()->stop).
  virtual Status launch(uint64_t idle_ns) = 0;
  virtual Run run() = 0;  // the last launch's
  virtual std::string failure() = 0;
};

class ProxyQueue {
 public:
  ProxyQueue(std::unique_ptr<ProxyAgent> agent, uint64_t idle_ns);
  ~ProxyQueue();  // asks the agent to leave and waits (a few seconds at most)
  ProxyQueue(const ProxyQueue&) = delete;
  ProxyQueue& operator=(const ProxyQueue&) = delete;

  // A ticket for wait(); posts from several threads are fine. Addresses and
  // sizes past 48 bits are kUnsupported (user-space addresses are below).
  Result<uint64_t> post(void* dst, const void* src, size_t bytes);
  Status wait(uint64_t ticket);
  Status copy(void* dst, const void* src, size_t bytes);
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  // Requests a waiter found with the agent gone and launched it again for:
  // the protocol says never (a test counts them).
  uint64_t rescues() const { return rescues_.load(std::memory_order_relaxed); }

 private:
  Status ensure_running();  // under mu_
  uint64_t done() const;

  std::unique_ptr<ProxyAgent> agent_;
  ProxyCtl* ctl_;
  ProxySlot* ring_;
  const uint64_t idle_ns_;
  std::mutex mu_;
  uint64_t head_ = 0;  // under mu_
  bool launched_ = false;
  bool failed_ = false;
  std::atomic<uint64_t> launches_{0}, rescues_{0};
};

// The GPU's agent on the current device (pack/cuda/proxy.cu); kUnsupported
// without CUDA.
Result<std::unique_ptr<ProxyQueue>> make_gpu_proxy(uint64_t idle_ns);

}  // namespace loom::pack
