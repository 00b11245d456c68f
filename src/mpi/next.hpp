// The next definition of each intercepted MPI function: the MPI library's,
// or a PMPI-based tool's loaded after Loom, found with dlsym(RTLD_NEXT) so
// Loom stacks with such tools and works both under LD_PRELOAD and linked
// before the MPI library.
#pragma once

namespace loom::mpi {

// The address of the next `name` after Loom (falls back to P`name`); aborts
// with a clear message when the MPI has neither.
void* find_next(const char* name);

}  // namespace loom::mpi

// LOOM_NEXT(MPI_Send)(args...): resolved once, then a plain indirect call.
#define LOOM_NEXT(fn)                                                                          \
  ([]() {                                                                                      \
    static const auto next_fn_ = reinterpret_cast<decltype(&fn)>(::loom::mpi::find_next(#fn)); \
    return next_fn_;                                                                           \
  }())
