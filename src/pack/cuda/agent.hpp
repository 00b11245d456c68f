// What one thread (words kernel) or one group of lanes (segments kernel)
// does: the kernel bodies minus the grid loop, as host/device functions so
// the CPU tests can run them lane by lane. In CUB terms these are the agents.
#pragma once

#include <vector_types.h>

#include <cstdint>
#include <cstring>

#include "pack/cuda/geometry.hpp"

namespace loom::pack::gpu {

template <int W>
struct WordOf;
template <>
struct WordOf<1> {
  using T = uint8_t;
};
template <>
struct WordOf<2> {
  using T = uint16_t;
};
template <>
struct WordOf<4> {
  using T = uint32_t;
};
template <>
struct WordOf<8> {
  using T = uint2;
};
template <>
struct WordOf<16> {
  using T = uint4;
};

// Words in flight per thread and loop trip: narrow words need more of them
// to keep enough bytes outstanding per SM.
LOOM_HD constexpr int words_items(int W) {
  return W <= 2 ? 8 : 4;
}

// Aligned loads and stores; on the host through memcpy (no aliasing games).
template <class T>
LOOM_HD T load_as(const char* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

template <class T>
LOOM_HD void store_as(char* p, T v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof v);
#endif
}

// Kernel arguments. `user` already includes the layout's base offset; `pack`
// says which side is read (pack: user -> packed; unpack: packed -> user).
struct WordArgs {
  char* user = nullptr;
  char* packed = nullptr;
  int pack = 1;
  WordGeom geom;
};

struct SegArgs {
  char* user = nullptr;
  char* packed = nullptr;
  int pack = 1;
  int lanes = 32;  // lanes per group, a power of two <= 32
  int lanes_log2 = 5;
  SegGeom geom;
};

// Source and destination of word g (0 <= g < nwords).
template <int W>
LOOM_HD void word_ends(const WordArgs& a, int64_t g, const char** src, char** dst) {
  char* u = a.user + word_user_offset(a.geom, g, W);
  char* p = a.packed + g * W;
  *src = a.pack ? u : p;
  *dst = a.pack ? p : u;
}

// ---- group copy: n bytes from s to d by `lanes` cooperating lanes --------
//
// Words are aligned on the destination. When source and destination agree
// modulo 16 (or 8, or 4) the body moves in such words; bytes before the first
// and after the last aligned word go one per lane. Otherwise every aligned
// 4-byte destination word is assembled from the two aligned 4-byte source
// words that hold it (a funnel shift), so both sides still move 4-byte words;
// the first and last words, whose aligned source words would reach past the
// run, are built byte by byte, so nothing outside [s, s + n) is ever read.

LOOM_HD void copy_bytes(char* d, const char* s, int64_t from, int64_t to, int lane, int lanes) {
  for (int64_t i = from + lane; i < to; i += lanes) d[i] = s[i];
}

template <class T>
LOOM_HD void copy_words(char* d, const char* s, int64_t n, int lane, int lanes) {
  constexpr int64_t A = sizeof(T);
  int64_t head = static_cast<int64_t>((A - (reinterpret_cast<uintptr_t>(d) & (A - 1))) & (A - 1));
  if (head > n) head = n;
  const int64_t nw = (n - head) / A;
  char* dw = d + head;
  const char* sw = s + head;
  int64_t j = lane;
  // Four words per lane per trip: loads first, so they are in flight together.
  for (; j + 3 * lanes < nw; j += 4 * lanes) {
    T v0 = load_as<T>(sw + j * A);
    T v1 = load_as<T>(sw + (j + lanes) * A);
    T v2 = load_as<T>(sw + (j + 2 * lanes) * A);
    T v3 = load_as<T>(sw + (j + 3 * lanes) * A);
    store_as<T>(dw + j * A, v0);
    store_as<T>(dw + (j + lanes) * A, v1);
    store_as<T>(dw + (j + 2 * lanes) * A, v2);
    store_as<T>(dw + (j + 3 * lanes) * A, v3);
  }
  for (; j < nw; j += lanes) store_as<T>(dw + j * A, load_as<T>(sw + j * A));
  copy_bytes(d, s, 0, head, lane, lanes);
  copy_bytes(d, s, head + nw * A, n, lane, lanes);
}

LOOM_HD uint32_t funnel_right(uint32_t lo, uint32_t hi, uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, bits);
#else
  return static_cast<uint32_t>(((uint64_t{hi} << 32) | lo) >> bits);
#endif
}

LOOM_HD void copy_shifted(char* d, const char* s, int64_t n, int lane, int lanes) {
  int64_t head = static_cast<int64_t>((4 - (reinterpret_cast<uintptr_t>(d) & 3)) & 3);
  if (head > n) head = n;
  const int64_t nw = (n - head) / 4;
  if (nw > 0) {
    const char* s0 = s + head;  // source of destination word 0
    const uintptr_t lo = reinterpret_cast<uintptr_t>(s);
    const uintptr_t hi = lo + static_cast<uintptr_t>(n);
    const uintptr_t r = reinterpret_cast<uintptr_t>(s0) & 3;   // != 0 here
    const uintptr_t a0 = reinterpret_cast<uintptr_t>(s0) - r;  // aligned word below it
    const uint32_t bits = static_cast<uint32_t>(8 * r);
    char* dw = d + head;
    for (int64_t j = lane; j < nw; j += lanes) {
      const uintptr_t a = a0 + 4 * static_cast<uintptr_t>(j);
      uint32_t v;
      if (a >= lo && a + 8 <= hi) {
        const char* ap = s + (a - lo);
        v = funnel_right(load_as<uint32_t>(ap), load_as<uint32_t>(ap + 4), bits);
      } else {  // little endian: byte k of the word is bits 8k..8k+7
        const unsigned char* b = reinterpret_cast<const unsigned char*>(s0 + 4 * j);
        v = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
      }
      store_as<uint32_t>(dw + 4 * j, v);
    }
  }
  copy_bytes(d, s, 0, head, lane, lanes);
  copy_bytes(d, s, head + nw * 4, n, lane, lanes);
}

// The lane's share of copying n bytes; all lanes of the group call it with
// the same (d, s, n), so the branch below is uniform across the group.
LOOM_HD void group_copy(char* d, const char* s, int64_t n, int lane, int lanes) {
  const uintptr_t rel = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s);
  if ((rel & 15) == 0)
    copy_words<uint4>(d, s, n, lane, lanes);
  else if ((rel & 7) == 0)
    copy_words<uint2>(d, s, n, lane, lanes);
  else if ((rel & 3) == 0)
    copy_words<uint32_t>(d, s, n, lane, lanes);
  else
    copy_shifted(d, s, n, lane, lanes);
}

// The lane's share of segment item i.
LOOM_HD void seg_move(const SegArgs& a, int64_t i, int lane) {
  SegRef r = seg_item(a.geom, i);
  char* u = a.user + r.user;
  char* p = a.packed + r.packed;
  if (a.pack)
    group_copy(p, u, r.len, lane, a.lanes);
  else
    group_copy(u, p, r.len, lane, a.lanes);
}

}  // namespace loom::pack::gpu
