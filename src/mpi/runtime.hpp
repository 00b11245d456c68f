// The one runtime object: every piece of Loom state that outlives a call
// lives here, created at MPI_Init (loom_init) and torn down at MPI_Finalize.
#pragma once

#include <memory>
#include <mutex>

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

  // The mover for a device message of `bytes` packed bytes, by LOOM_METHOD
  // (auto: one-shot up to kOneShotMax, staged above, until the measured model
  // decides). Null when no GPU mover can be made. GPU movers are made on
  // first use, on the device current then (after the application chose it).
  transport::Mover* mover_for(size_t bytes);
  // Staging and scratch bytes handed out by all movers (zero when idle).
  size_t bytes_in_use() const;

  static constexpr size_t kOneShotMax = size_t{1} << 20;

 private:
  transport::Mover* gpu(transport::Method m);

  enum class Choice { kAuto, kOneShot, kStaged };
  Choice choice_ = Choice::kAuto;
  bool host_as_device_ = false;
  std::unique_ptr<transport::Mover> host_;
  std::mutex mu_;
  std::unique_ptr<transport::Mover> oneshot_, staged_;
  bool gpu_failed_ = false;
};

// The runtime, or null when Loom is not initialised (or disabled).
Runtime* runtime();

}  // namespace loom
