// Frees of CUDA memory held back while a stream may wait for a host thread.
//
// cudaFree and cudaFreeHost wait until the device is idle, and meanwhile
// hold up other threads' launches, copies, event records and allocations
// (scripts/probes/free_blocks_others.cu, docs/results/cuda-frees-h200.md).
// Stream-triggered communication (src/stream) makes streams wait for Loom's
// progress thread, which posts copies and launches, and for other ranks: a
// free then, on any thread, can hang the process. So while the stream engine
// has a live channel the gate is closed: pools keep what they would free past
// their cap, and other frees wait in a list, freed when the last channel goes
// (then nothing of Loom's makes a stream wait for a host) or at finalize.
//
// A free and the opening of a channel exclude each other, so no stream comes
// to wait on Loom while a free waits for the device.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <shared_mutex>
#include <vector>

namespace loom::pack {

class FreeGate {
 public:
  enum class Kind { kDevice, kHost };  // cudaFree, cudaFreeHost
  using FreeFn = void (*)(Kind kind, void* p, int device);

  // The process's gate, freeing with the CUDA runtime.
  static FreeGate& get();
  explicit FreeGate(FreeFn fn) : free_(fn) {}

  // A channel of the stream engine comes / goes. The last one out frees what
  // was held back (under the gate: no channel opens meanwhile).
  void channel_opened();
  void channel_closed();
  // At finalize, once the stream engine stopped: frees what was held back
  // whatever channels remain (nothing drives them any more).
  void drain();

  // Frees p (device memory of `device`, or pinned host memory) now, or once
  // the gate opens.
  void release(Kind kind, void* p, int device);
  // Whether a free may run now (pools: evict past the cap only then). Racy
  // by design: a free it allows still goes through release().
  bool open() const;
  size_t held() const;  // frees waiting for the gate

 private:
  struct Held {
    Kind kind;
    void* p;
    int device;
  };
  void free_all_locked();

  const FreeFn free_;
  mutable std::shared_mutex mu_;  // shared: a free runs; exclusive: channels change
  std::atomic<int> channels_{0};  // written under mu_ held exclusively
  std::atomic<bool> drained_{false};
  mutable std::mutex held_mu_;
  std::vector<Held> held_;  // under held_mu_
};

// Keeps the process's gate closed while it lives (a channel of the stream
// engine).
class FreeGateHold {
 public:
  FreeGateHold() { FreeGate::get().channel_opened(); }
  ~FreeGateHold() { FreeGate::get().channel_closed(); }
  FreeGateHold(const FreeGateHold&) = delete;
  FreeGateHold& operator=(const FreeGateHold&) = delete;
};

}  // namespace loom::pack
