// What Loom knows of one committed datatype. MPI-free.
#pragma once

#include <string>

#include "type/ir.hpp"

namespace loom::type {

struct TypeInfo {
  NodePtr ir;                  // as read back from the MPI, before canonicalisation
  NodePtr form;                // canonical form of one element; null when the type has no data
  int64_t size = 0;            // data bytes of one element
  int64_t lb = 0, extent = 0;  // as the MPI reports them
  int64_t true_lb = 0, true_extent = 0;  // as the MPI reports them
  uint64_t hash() const { return form ? form->hash : 0; }
  std::string describe() const;  // multi-line: IR, form, hash, extents
};

}  // namespace loom::type
