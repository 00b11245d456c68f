// Host pack/unpack engine: the reference path and the fallback when no GPU
// path applies. Driven by a Layout; never touches bytes outside the layout.
#pragma once

#include <cstddef>

#include "pack/layout.hpp"

namespace loom::pack {

// Packs the layout's bytes of `src` (the user buffer) into `dst` (total bytes).
void host_pack(const LayoutView& l, const void* src, void* dst);
// Scatters `total` packed bytes of `src` into the user buffer `dst`.
void host_unpack(const LayoutView& l, const void* src, void* dst);

inline void host_pack(const Layout& l, const void* src, void* dst) {
  host_pack(l.view(), src, dst);
}
inline void host_unpack(const Layout& l, const void* src, void* dst) {
  host_unpack(l.view(), src, dst);
}

}  // namespace loom::pack
