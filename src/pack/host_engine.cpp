#include "pack/host_engine.hpp"

#include <cstring>

namespace loom::pack {
namespace {

// Calls f(offset) for each repetition of the dims, in packed order, keeping
// the offset incrementally (an odometer) instead of dividing per block.
template <class F>
void for_each_rep(const std::vector<Dim>& dims, F&& f) {
  int nd = static_cast<int>(dims.size());
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

template <int64_t N>
void copy_fixed(char* d, const char* s) {
  std::memcpy(d, s, N);  // constant size: one or two moves
}

// Strided blocks of one small fixed size: the copy inlines.
template <bool kPack, int64_t N>
void strided_fixed(const Layout& l, char* user, char* packed) {
  for_each_rep(l.dims, [&](int64_t off) {
    if constexpr (kPack)
      copy_fixed<N>(packed, user + off);
    else
      copy_fixed<N>(user + off, packed);
    packed += N;
  });
}

template <bool kPack>
void run(const Layout& l, char* user, char* packed) {
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
        default:
          break;
      }
      const int64_t n = l.block_len;
      for_each_rep(l.dims, [&](int64_t off) {
        if constexpr (kPack)
          std::memcpy(packed, user + off, n);
        else
          std::memcpy(user + off, packed, n);
        packed += n;
      });
      return;
    }
    case LayoutKind::kBlocks: {
      const Block* b = l.blocks.data();
      const size_t nb = l.blocks.size();
      for_each_rep(l.dims, [&](int64_t off) {
        for (size_t i = 0; i < nb; ++i) {
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

void host_pack(const Layout& l, const void* src, void* dst) {
  run<true>(l, const_cast<char*>(static_cast<const char*>(src)), static_cast<char*>(dst));
}

void host_unpack(const Layout& l, const void* src, void* dst) {
  run<false>(l, static_cast<char*>(dst), const_cast<char*>(static_cast<const char*>(src)));
}

}  // namespace loom::pack
