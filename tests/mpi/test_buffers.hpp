// Shared by the multi-rank tests: ranks, user buffers for datatype
// messages, and the MPI-made oracle of what a receive must leave in one.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace loom::test {

inline int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// A user buffer for `count` elements of t with margins, its origin, and a
// deterministic fill.
struct Buffer {
  std::vector<unsigned char> bytes;
  int64_t lo = 0;
  Buffer(MPI_Datatype t, int count, unsigned fill_seed) {
    MPI_Count tlb, text, lb, ext;
    MPI_Type_get_true_extent_x(t, &tlb, &text);
    MPI_Type_get_extent_x(t, &lb, &ext);
    int64_t shift = static_cast<int64_t>(count > 0 ? count - 1 : 0) * ext;
    lo = tlb + std::min<int64_t>(0, shift) - 16;
    int64_t hi = tlb + text + std::max<int64_t>(0, shift) + 16;
    bytes.resize(static_cast<size_t>(hi - lo));
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<unsigned char>(fill_seed == 0 ? 0x5A : (i * 37 + fill_seed) >> 2);
  }
  void* origin() { return bytes.data() - lo; }
};

// What the receiver's buffer must hold: the sender's data packed and
// unpacked by the MPI itself into the receiver's initial buffer.
inline std::vector<unsigned char> expected(MPI_Datatype st, int scount, Buffer& src,
                                           MPI_Datatype rt, int rcount, const Buffer& initial) {
  int cap = 0;
  PMPI_Pack_size(scount, st, MPI_COMM_SELF, &cap);
  std::vector<char> packed(cap + 1);
  int pos = 0;
  PMPI_Pack(src.origin(), scount, st, packed.data(), cap, &pos, MPI_COMM_SELF);
  Buffer out = initial;
  int upos = 0, rsize = 0;
  MPI_Type_size(rt, &rsize);
  // Only the whole elements that arrived (MPI_Unpack wants all it is asked for).
  const int whole = rsize > 0 ? std::min(rcount, pos / rsize) : 0;
  if (whole > 0) PMPI_Unpack(packed.data(), pos, &upos, out.origin(), whole, rt, MPI_COMM_SELF);
  return out.bytes;
}

}  // namespace loom::test
