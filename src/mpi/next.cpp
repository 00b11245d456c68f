#include "mpi/next.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace loom::mpi {

void* find_next(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) {
    char pname[128];  // a buffer, not std::string: GCC 12 -O3 warns falsely on the concatenation
    std::snprintf(pname, sizeof pname, "P%s", name);
    p = dlsym(RTLD_DEFAULT, pname);
  }
  if (!p) {
    std::fprintf(stderr, "[loom] FATAL: the MPI library defines neither %s nor P%s\n", name, name);
    std::abort();
  }
  return p;
}

}  // namespace loom::mpi
