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

bool Runtime::parse(const std::string& name, Choice* out) {
  static const std::pair<const char*, Choice> names[] = {{"auto", Choice::kAuto},
                                                         {"oneshot", Choice::kOneShot},
                                                         {"staged", Choice::kStaged},
                                                         {"device", Choice::kDevice}};
  for (const auto& [n, c] : names)
    if (name == n) {
      *out = c;
      return true;
    }
  return false;
}

Runtime::Runtime() : host_(transport::make_host_mover()) {
  const std::string& m = knobs().method;
  Choice c = Choice::kAuto;
  if (!parse(m, &c))
    LOOM_WARN(kTransport, "LOOM_METHOD=%s is not known (device|oneshot|staged|auto): using auto",
              m.c_str());
  choice_ = c;
  host_as_device_ = knob_true(knobs().test_host_as_device);
}

bool Runtime::set_method(const std::string& name) {
  Choice c;
  if (!parse(name, &c) || (c == Choice::kDevice && !rv)) return false;
  choice_ = c;
  return true;
}

Runtime::~Runtime() {
  requests.drain();
  if (rv) rv->shutdown();
}

bool Runtime::wants_device_method() const {
  // In the host test mode only when forced, so the other test modes keep
  // their wire format.
  const Choice c = choice_.load(std::memory_order_relaxed);
  return c == Choice::kDevice || (c == Choice::kAuto && !host_as_device_);
}

bool Runtime::device_method(size_t bytes) const {
  // Smaller messages than the header cannot take it: a receive sized for
  // the message (all a correct program posts) would truncate the header.
  if (!rv || bytes < static_cast<size_t>(mpi::kHeaderBytes)) return false;
  const Choice c = choice_.load(std::memory_order_relaxed);
  return c == Choice::kDevice || (c == Choice::kAuto && bytes >= kDeviceMin);
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
  switch (choice_.load(std::memory_order_relaxed)) {
    case Choice::kOneShot:
      return gpu(transport::Method::kOneShot);
    case Choice::kStaged:
    case Choice::kDevice:  // packs into lent segments; staged where the method cannot go
      return gpu(transport::Method::kStaged);
    case Choice::kAuto:
      break;
  }
  return gpu(bytes <= kOneShotMax ? transport::Method::kOneShot : transport::Method::kStaged);
}

size_t Runtime::bytes_in_use() const {
  size_t n = host_->bytes_in_use();
  if (rv) {
    rv->progress();
    n += rv->bytes_lent();
  }
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
  if (up) rt->rv = mpi::Rendezvous::create(rt->wants_device_method(), rt->host_as_device());
  if (rt->rv) rt->probed = std::make_unique<mpi::ProbedMessages>(*rt->rv);
  Runtime* expected = nullptr;
  if (!g_runtime.compare_exchange_strong(expected, rt)) delete rt;
  LOOM_INFO(kMpi, "Loom %d.%d initialised", LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR);
  return MPI_SUCCESS;
}

extern "C" int loom_finalize(void) {
  // Detached receives finish (and may pull device-method messages) while the
  // runtime is still published.
  if (loom::Runtime* live = loom::runtime()) {
    live->requests.drain();
    if (live->rv) live->rv->shutdown();
  }
  loom::Runtime* rt = loom::g_runtime.exchange(nullptr);
  if (rt && rt->bytes_in_use() != 0)
    LOOM_WARN(kMpi, "finalize with %zu staging bytes still in use", rt->bytes_in_use());
  delete rt;
  return MPI_SUCCESS;
}

extern "C" int loom_set_method(const char* name) {
  loom::Runtime* rt = loom::runtime();
  if (!rt || !name || !rt->set_method(name)) return MPI_ERR_ARG;
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
