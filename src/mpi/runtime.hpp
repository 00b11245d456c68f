// The one runtime object: every piece of Loom state that outlives a call
// lives here, created at MPI_Init (loom_init) and torn down at MPI_Finalize.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "mpi/probed.hpp"
#include "mpi/rendezvous.hpp"
#include "mpi/requests.hpp"
#include "mpi/type_registry.hpp"
#include "transport/mover.hpp"

namespace loom {

class Runtime {
 public:
  Runtime();
  ~Runtime();

  mpi::TypeRegistry types;
  mpi::RequestTable requests;
  // The device method's handshake; null when the job does not use it (set
  // at loom_init, before the runtime is published, and never changed).
  std::unique_ptr<mpi::Rendezvous> rv;
  // Messages probes took off the MPI's queue; exists exactly when rv does.
  std::unique_ptr<mpi::ProbedMessages> probed;

  // The mover for a device message of `bytes` packed bytes, by LOOM_METHOD
  // (auto: one-shot up to kOneShotMax, staged above, until the measured model
  // decides). Null when no GPU mover can be made. GPU movers are made on
  // first use, on the device current then (after the application chose it).
  transport::Mover* mover_for(size_t bytes);
  // True when a device message of `bytes` should take the device method
  // (to a peer of this node; the caller checks that): LOOM_METHOD=device,
  // or auto from kDeviceMin up.
  bool device_method(size_t bytes) const;
  // Staging, scratch and lent bytes not yet returned (zero when idle).
  size_t bytes_in_use() const;

  // Whether this rank wants the device method (LOOM_METHOD): all ranks must.
  bool wants_device_method() const;
  bool host_as_device() const { return host_as_device_; }
  // loom_set_method: false for an unknown name or the device method off.
  bool set_method(const std::string& name);

  static constexpr size_t kOneShotMax = size_t{1} << 20;
  static constexpr size_t kDeviceMin = size_t{8} << 10;  // H200 pingpong crossover

 private:
  transport::Mover* gpu(transport::Method m);

  enum class Choice { kAuto, kOneShot, kStaged, kDevice };
  static bool parse(const std::string& name, Choice* out);
  std::atomic<Choice> choice_{Choice::kAuto};
  bool host_as_device_ = false;
  std::unique_ptr<transport::Mover> host_;
  std::mutex mu_;
  std::unique_ptr<transport::Mover> oneshot_, staged_;
  bool gpu_failed_ = false;
};

// The runtime, or null when Loom is not initialised (or disabled).
Runtime* runtime();

}  // namespace loom
