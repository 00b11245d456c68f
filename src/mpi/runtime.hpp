// The one runtime object: every piece of Loom state that outlives a call
// lives here, created at MPI_Init (loom_init) and torn down at MPI_Finalize.
#pragma once

#include "mpi/type_registry.hpp"

namespace loom {

struct Runtime {
  mpi::TypeRegistry types;
};

// The runtime, or null when Loom is not initialised (or disabled).
Runtime* runtime();

}  // namespace loom
