// Loom's staging and lent segments in use once a test's ranks are done
// (after their barrier): an ack sent before the barrier may still be on its
// way, since MPI orders messages only within a communicator and acks go on
// Loom's own (MPICH 5.0 was seen to deliver one after the barrier), so this
// gives them up to a second.
#pragma once

#include <chrono>
#include <cstddef>
#include <thread>

#include "mpi/runtime.hpp"

namespace loom::test {

inline size_t staging_in_use_settled() {
  size_t n = runtime()->bytes_in_use();
  for (int i = 0; i < 2000 && n != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    n = runtime()->bytes_in_use();
  }
  return n;
}

}  // namespace loom::test
