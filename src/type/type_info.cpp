#include "type/type_info.hpp"

#include <cstdio>

namespace loom::type {

std::string TypeInfo::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "size %lld, lb %lld, extent %lld, true lb %lld, true extent %lld\n"
                "form hash %016llx\n",
                (long long)size, (long long)lb, (long long)extent, (long long)true_lb,
                (long long)true_extent, (unsigned long long)hash());
  return std::string("ir:   ") + to_string(ir) + "\nform: " + to_string(form) + "\n" + buf;
}

}  // namespace loom::type
