#include "mpi/runtime.hpp"

#include <atomic>

#include "loom/loom.h"
#include "util/knobs.hpp"
#include "util/log.hpp"

namespace loom {
namespace {
std::atomic<Runtime*> g_runtime{nullptr};
}

Runtime* runtime() {
  return g_runtime.load(std::memory_order_acquire);
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
  auto* rt = new Runtime();
  Runtime* expected = nullptr;
  if (!g_runtime.compare_exchange_strong(expected, rt)) delete rt;
  LOOM_INFO(kMpi, "Loom %d.%d initialised", LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR);
  return MPI_SUCCESS;
}

extern "C" int loom_finalize(void) {
  delete loom::g_runtime.exchange(nullptr);
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
