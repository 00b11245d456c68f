#include "mpi/next.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace loom::mpi {

void* find_next(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) p = dlsym(RTLD_DEFAULT, ("P" + std::string(name)).c_str());
  if (!p) {
    std::fprintf(stderr, "[loom] FATAL: the MPI library defines neither %s nor P%s\n", name, name);
    std::abort();
  }
  return p;
}

}  // namespace loom::mpi
