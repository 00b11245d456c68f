#include "mpi/runtime.hpp"

#include <atomic>

#include "loom/loom.h"
#include "transport/memtype.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"

namespace loom {
namespace {
std::atomic<Runtime*> g_runtime{nullptr};
}

Runtime* runtime() {
  return g_runtime.load(std::memory_order_acquire);
}

Runtime::Runtime() : host_(transport::make_host_mover()) {
  const std::string& m = knobs().method;
  if (m == "oneshot")
    choice_ = Choice::kOneShot;
  else if (m == "staged")
    choice_ = Choice::kStaged;
  else if (m != "auto")
    LOOM_WARN(kTransport, "LOOM_METHOD=%s is not known (oneshot|staged|auto): using auto",
              m.c_str());
  host_as_device_ = knob_true(knobs().test_host_as_device);
}

Runtime::~Runtime() {
  requests.drain();
}

transport::Mover* Runtime::gpu(transport::Method m) {
  std::lock_guard<std::mutex> lk(mu_);
  auto& slot = m == transport::Method::kOneShot ? oneshot_ : staged_;
  if (!slot && !gpu_failed_) {
    auto made = transport::make_gpu_mover(m);
    if (made) {
      slot = std::move(made.value());
    } else {
      gpu_failed_ = true;
      LOOM_LOG(kError, kTransport, "no GPU mover: %s", made.status().message().c_str());
    }
  }
  return slot.get();
}

transport::Mover* Runtime::mover_for(size_t bytes) {
  if (host_as_device_) return host_.get();
  switch (choice_) {
    case Choice::kOneShot:
      return gpu(transport::Method::kOneShot);
    case Choice::kStaged:
      return gpu(transport::Method::kStaged);
    case Choice::kAuto:
      break;
  }
  return gpu(bytes <= kOneShotMax ? transport::Method::kOneShot : transport::Method::kStaged);
}

size_t Runtime::bytes_in_use() const {
  size_t n = host_->bytes_in_use();
  if (oneshot_) n += oneshot_->bytes_in_use();
  if (staged_) n += staged_->bytes_in_use();
  return n;
}

}  // namespace loom

extern "C" int loom_init(void) {
  using namespace loom;
  if (runtime()) return MPI_SUCCESS;
  knobs_reload();
  log_reload();
  if (knob_true(knobs().disable)) return MPI_SUCCESS;
  int rank = -1, up = 0;
  MPI_Initialized(&up);
  if (up) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  log_set_rank(rank);
  transport::memtype_init();
  auto* rt = new Runtime();
  Runtime* expected = nullptr;
  if (!g_runtime.compare_exchange_strong(expected, rt)) delete rt;
  LOOM_INFO(kMpi, "Loom %d.%d initialised", LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR);
  return MPI_SUCCESS;
}

extern "C" int loom_finalize(void) {
  loom::Runtime* rt = loom::g_runtime.exchange(nullptr);
  if (rt && rt->bytes_in_use() != 0)
    LOOM_WARN(kMpi, "finalize with %zu staging bytes still in use", rt->bytes_in_use());
  delete rt;
  return MPI_SUCCESS;
}

extern "C" int loom_type_commit(MPI_Datatype type) {
  loom::Runtime* rt = loom::runtime();
  if (!rt) return MPI_SUCCESS;
  auto e = rt->types.commit(type);
  // Unsupported types are fine: they are handed back to the MPI later.
  if (!e && e.status().code() == loom::Err::kNullType) return MPI_ERR_TYPE;
  return MPI_SUCCESS;
}

extern "C" int loom_type_free(MPI_Datatype type) {
  if (loom::Runtime* rt = loom::runtime()) rt->types.release(type);
  return MPI_SUCCESS;
}
