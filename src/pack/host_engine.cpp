#include "pack/host_engine.hpp"

#include <cstring>

namespace loom::pack {
namespace {

// Calls f(offset) for each repetition of the dims, in packed order, keeping
// the offset incrementally (an odometer) instead of dividing per block.
template <class F>
void for_each_rep(const Dim* dims, int nd, F&& f) {
  if (nd == 0) {
    f(int64_t{0});
    return;
  }
  int64_t idx[kMaxDims] = {};
  int64_t off = 0;
  const Dim& inner = dims[nd - 1];
  for (;;) {
    int64_t o = off;
    for (int64_t i = 0; i < inner.count; ++i, o += inner.stride) f(o);
    int d = nd - 2;
    for (; d >= 0; --d) {
      off += dims[d].stride;
      if (++idx[d] < dims[d].count) break;
      off -= dims[d].stride * dims[d].count;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// One row of the innermost dim, N bytes a block: a tight loop the compiler
// turns into plain moves.
template <bool kPack, int64_t N>
char* row_fixed(char* u, int64_t count, int64_t stride, char* packed) {
  for (int64_t i = 0; i < count; ++i, u += stride, packed += N) {
    if constexpr (kPack)
      std::memcpy(packed, u, N);
    else
      std::memcpy(u, packed, N);
  }
  return packed;
}

// Strided blocks of one small fixed size: rows of the innermost dim, the
// outer dims walked by the odometer.
template <bool kPack, int64_t N>
void strided_fixed(const LayoutView& l, char* user, char* packed) {
  const Dim inner = l.dims[l.ndims - 1];
  for_each_rep(l.dims, l.ndims - 1, [&](int64_t off) {
    packed = row_fixed<kPack, N>(user + off, inner.count, inner.stride, packed);
  });
}

template <bool kPack>
void run(const LayoutView& l, char* user, char* packed) {
  user += l.base;
  switch (l.kind) {
    case LayoutKind::kEmpty:
      return;
    case LayoutKind::kContiguous:
      if (kPack)
        std::memcpy(packed, user, l.total);
      else
        std::memmove(user, packed, l.total);
      return;
    case LayoutKind::kStrided: {
      switch (l.block_len) {
        case 1:
          return strided_fixed<kPack, 1>(l, user, packed);
        case 2:
          return strided_fixed<kPack, 2>(l, user, packed);
        case 4:
          return strided_fixed<kPack, 4>(l, user, packed);
        case 8:
          return strided_fixed<kPack, 8>(l, user, packed);
        case 16:
          return strided_fixed<kPack, 16>(l, user, packed);
        case 32:
          return strided_fixed<kPack, 32>(l, user, packed);
        case 64:
          return strided_fixed<kPack, 64>(l, user, packed);
        default:
          break;
      }
      const int64_t n = l.block_len;
      for_each_rep(l.dims, l.ndims, [&](int64_t off) {
        if constexpr (kPack)
          std::memcpy(packed, user + off, n);
        else
          std::memcpy(user + off, packed, n);
        packed += n;
      });
      return;
    }
    case LayoutKind::kBlocks: {
      const Block* b = l.blocks;
      const int64_t nb = l.nblocks;
      for_each_rep(l.dims, l.ndims, [&](int64_t off) {
        for (int64_t i = 0; i < nb; ++i) {
          if constexpr (kPack)
            std::memcpy(packed, user + off + b[i].off, b[i].len);
          else
            std::memcpy(user + off + b[i].off, packed, b[i].len);
          packed += b[i].len;
        }
      });
      return;
    }
  }
}

}  // namespace

void host_pack(const LayoutView& l, const void* src, void* dst) {
  run<true>(l, const_cast<char*>(static_cast<const char*>(src)), static_cast<char*>(dst));
}

void host_unpack(const LayoutView& l, const void* src, void* dst) {
  run<false>(l, static_cast<char*>(dst), const_cast<char*>(static_cast<const char*>(src)));
}

}  // namespace loom::pack
