// loom_type_describe: what Loom made of a datatype, as text.
#include <cstring>
#include <string>

#include "loom/loom.h"
#include "mpi/errors.hpp"
#include "mpi/runtime.hpp"
#include "pack/layout.hpp"
#include "type/canonical.hpp"

extern "C" int loom_type_describe(MPI_Datatype type, char* buf, size_t len) {
  using namespace loom;
  if (!buf || len == 0) return MPI_ERR_ARG;
  Runtime* rt = runtime();
  std::string text;
  if (!rt) {
    text = "Loom is not initialised or is disabled\n";
  } else {
    auto e = rt->types.lookup(type);
    if (!e) {
      if (e.status().code() != Err::kUnsupported) return mpi::error_class(e.status().code());
      text = "not accelerated (handed to the MPI): " + e.status().message() + "\n";
    } else {
      text = e.value()->info.describe() + "layout: " + e.value()->layout.describe() + "\n";
    }
  }
  size_t n = std::min(len - 1, text.size());
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
  return MPI_SUCCESS;
}
