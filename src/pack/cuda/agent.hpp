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

#if !defined(__CUDA_ARCH__)
// Host emulation only: a test may fence the loads in, to check that a copy
// never reads outside its run; `bad` counts loads that left [lo, hi).
struct LoadFence {
  const char* lo = nullptr;
  const char* hi = nullptr;
  long bad = 0;
};
inline thread_local LoadFence* load_fence = nullptr;
#endif

// Aligned loads and stores; on the host through memcpy (no aliasing games).
template <class T>
LOOM_HD T load_as(const char* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  if (load_fence && (p < load_fence->lo || p + sizeof(T) > load_fence->hi)) ++load_fence->bad;
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

// Transfer: packed word g read from one layout and written to another (a
// peer's buffer in the peer's layout straight into the receive's), no
// packed buffer between. Both geometries are for the same word width W;
// `src` and `dst` include their layouts' base offsets.
struct XferArgs {
  const char* src = nullptr;
  char* dst = nullptr;
  WordGeom from;
  WordGeom to;
};

template <int W>
LOOM_HD void xfer_ends(const XferArgs& a, int64_t g, const char** src, char** dst) {
  *src = a.src + word_user_offset(a.from, g, W);
  *dst = a.dst + word_user_offset(a.to, g, W);
}

// A words job's length and where its word g goes, for either kind: packed
// order on one side (WordArgs) or a layout on both (XferArgs). The kernel
// and the CPU tests take both through these.
LOOM_HD int64_t nwords_of(const WordArgs& a) {
  return a.geom.nwords;
}
LOOM_HD int64_t nwords_of(const XferArgs& a) {
  return a.from.nwords;
}
template <int W>
LOOM_HD void ends_of(const WordArgs& a, int64_t g, const char** s, char** d) {
  word_ends<W>(a, g, s, d);
}
template <int W>
LOOM_HD void ends_of(const XferArgs& a, int64_t g, const char** s, char** d) {
  xfer_ends<W>(a, g, s, d);
}

// ---- group copy: n bytes from s to d by `lanes` cooperating lanes --------
//
// The destination is written in aligned 16-byte words (the body), each lane
// taking words lane, lane + lanes, ... several per trip with all loads
// issued before the stores. When source and destination agree modulo 16 a
// body word is one aligned 16-byte load; when they are 8 apart, two aligned
// 8-byte loads. Otherwise it is cut out of the two aligned 16-byte source
// words that hold it (shift16), so both sides still move whole 16-byte words
// and a group's loads cover whole sectors, whatever the relative alignment. The bytes before the
// first body word and after the last (the edges: at most 31 on each side) go one per lane, loaded
// in the same round as the body. A body word whose aligned source words would reach outside [s, s +
// n) (only the first and the last can) is left to the edges, so nothing outside the run is ever
// read (compute-sanitizer clean, and safe at the ends of allocations).

inline constexpr int kBodyItems = 4;   // body words per lane per trip, aligned source
inline constexpr int kShiftItems = 2;  // ... shifted source (two loads a word)
inline constexpr int kEdgeItems = 4;   // edge bytes per lane per trip
inline constexpr int kTinyItems = 8;   // tiny bytes per thread per trip

LOOM_HD uint32_t funnel_right(uint32_t lo, uint32_t hi, uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, bits);
#else
  return static_cast<uint32_t>(((uint64_t{hi} << 32) | lo) >> bits);
#endif
}

// Bytes r .. r + 15 of the 32 bytes a:b (little endian), 0 < r < 16.
LOOM_HD uint4 shift16(uint4 a, uint4 b, uint32_t r) {
  const uint32_t q = r >> 2, bits = (r & 3) * 8;
  const uint32_t x0 = q == 0 ? a.x : q == 1 ? a.y : q == 2 ? a.z : a.w;
  const uint32_t x1 = q == 0 ? a.y : q == 1 ? a.z : q == 2 ? a.w : b.x;
  const uint32_t x2 = q == 0 ? a.z : q == 1 ? a.w : q == 2 ? b.x : b.y;
  const uint32_t x3 = q == 0 ? a.w : q == 1 ? b.x : q == 2 ? b.y : b.z;
  const uint32_t x4 = q == 0 ? b.x : q == 1 ? b.y : q == 2 ? b.z : b.w;
  uint4 v;
  v.x = funnel_right(x0, x1, bits);
  v.y = funnel_right(x1, x2, bits);
  v.z = funnel_right(x2, x3, bits);
  v.w = funnel_right(x3, x4, bits);
  return v;
}

// How a run of n bytes from s to d splits: body words [first, last) of the
// 16-byte destination words starting at d + head, the source offset r of
// s + head modulo 16 (0: the aligned path), and the edge bytes [0, lo) and
// [hi, n) that go one by one. Runs are shorter than 2^31 bytes (plan() cuts
// pieces at max_seg_bytes <= 2^30), so the offsets inside one are 32-bit.
struct RunSplit {
  int head = 0;  // bytes before the first 16-byte aligned destination address
  int first = 0, last = 0;
  uint32_t r = 0;
  int lo = 0, hi = 0;  // edges: [0, lo) and [hi, n)
};

LOOM_HD RunSplit split_run(const char* d, const char* s, int n) {
  RunSplit x;
  x.head = static_cast<int>((16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  if (x.head > n) x.head = n;
  const int nw = (n - x.head) >> 4;
  x.r = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(s + x.head) & 15);
  x.first = 0;
  x.last = nw;
  const int r = static_cast<int>(x.r);
  if ((r & 7) != 0 && nw > 0) {  // r == 8 reads the word's own two 8-byte halves
    // Word j's two source words start r bytes before its data (s + head +
    // 16 j) and end 16 - r bytes after it. For word 0 that is inside the run
    // only if the head is at least r long, for the last word only if the
    // tail is at least 16 - r long; every other word's source words lie
    // inside.
    if (x.head < r) x.first = 1;
    const int tail = n - x.head - 16 * nw;
    if (tail < 16 - r) x.last = nw - 1;
    if (x.last < x.first) x.last = x.first;
  }
  x.lo = x.head + 16 * x.first;
  x.hi = x.head + 16 * x.last;
  return x;
}

// Offset in the run of edge byte e (0 <= e < lo + n - hi).
LOOM_HD int edge_at(const RunSplit& x, int e) {
  return e < x.lo ? e : x.hi + (e - x.lo);
}

// The lane's share of the body: words j = first + lane, + lanes, ...
LOOM_HD void copy_body(char* d0, const char* s0, const RunSplit& x, int lane, int lanes) {
  const int stride = 16 * lanes;
  const int trip = kBodyItems * lanes;
  int j = x.first + lane;
  char* dp = d0 + 16 * j;
  if (x.r == 0) {
    const char* sp = s0 + 16 * j;
    for (; j < x.last; j += trip, sp += kBodyItems * stride, dp += kBodyItems * stride) {
      uint4 v[kBodyItems] = {};
      LOOM_UNROLL
      for (int k = 0; k < kBodyItems; ++k)
        if (j + k * lanes < x.last) v[k] = load_as<uint4>(sp + k * stride);
      LOOM_UNROLL
      for (int k = 0; k < kBodyItems; ++k)
        if (j + k * lanes < x.last) store_as<uint4>(dp + k * stride, v[k]);
    }
  } else if (x.r == 8) {  // two aligned 8-byte halves, both inside the word's data
    const char* sp = s0 + 16 * j;
    for (; j < x.last; j += trip, sp += kBodyItems * stride, dp += kBodyItems * stride) {
      uint2 v[kBodyItems] = {}, w[kBodyItems] = {};
      LOOM_UNROLL
      for (int k = 0; k < kBodyItems; ++k)
        if (j + k * lanes < x.last) {
          v[k] = load_as<uint2>(sp + k * stride);
          w[k] = load_as<uint2>(sp + k * stride + 8);
        }
      LOOM_UNROLL
      for (int k = 0; k < kBodyItems; ++k)
        if (j + k * lanes < x.last) {
          uint4 o;
          o.x = v[k].x;
          o.y = v[k].y;
          o.z = w[k].x;
          o.w = w[k].y;
          store_as<uint4>(dp + k * stride, o);
        }
    }
  } else {
    const char* sp = s0 - x.r + 16 * j;  // 16-byte aligned
    const int strip = kShiftItems * lanes;
    for (; j < x.last; j += strip, sp += kShiftItems * stride, dp += kShiftItems * stride) {
      uint4 v[kShiftItems] = {}, w[kShiftItems] = {};
      LOOM_UNROLL
      for (int k = 0; k < kShiftItems; ++k)
        if (j + k * lanes < x.last) {
          v[k] = load_as<uint4>(sp + k * stride);
          w[k] = load_as<uint4>(sp + k * stride + 16);
        }
      LOOM_UNROLL
      for (int k = 0; k < kShiftItems; ++k)
        if (j + k * lanes < x.last) store_as<uint4>(dp + k * stride, shift16(v[k], w[k], x.r));
    }
  }
}

// The lane's share of copying n bytes (n < 2^31); all lanes of the group
// call it with the same (d, s, n), so every branch on the split is uniform
// in the group.
LOOM_HD void group_copy(char* d, const char* s, int64_t len, int lane, int lanes) {
  const int n = static_cast<int>(len);
  const RunSplit x = split_run(d, s, n);
  const int ne = x.lo + (n - x.hi);
  if (ne == 0) {  // aligned and whole words (every strided row of 16-byte multiples)
    copy_body(d, s, x, lane, lanes);
    return;
  }
  // Edge bytes in trips of kEdgeItems per lane; the first trip is loaded
  // before the body and stored after it, so its loads share the body's round.
  const int etrip = kEdgeItems * lanes;
  unsigned char e[kEdgeItems] = {};
  LOOM_UNROLL
  for (int k = 0; k < kEdgeItems; ++k)
    if (lane + k * lanes < ne) e[k] = load_as<unsigned char>(s + edge_at(x, lane + k * lanes));
  copy_body(d + x.head, s + x.head, x, lane, lanes);
  for (int i = lane;;) {
    LOOM_UNROLL
    for (int k = 0; k < kEdgeItems; ++k)
      if (i + k * lanes < ne) d[edge_at(x, i + k * lanes)] = static_cast<char>(e[k]);
    i += etrip;
    if (i >= ne) break;  // narrow groups only: another trip
    LOOM_UNROLL
    for (int k = 0; k < kEdgeItems; ++k)
      if (i + k * lanes < ne) e[k] = load_as<unsigned char>(s + edge_at(x, i + k * lanes));
  }
}

// The lane's share of piece i of class c (a group class).
LOOM_HD void seg_move(const SegArgs& a, const SegClass& c, int64_t i, int lane) {
  const SegRef r = seg_item(a.geom, c, i);
  char* u = a.user + r.user;
  char* p = a.packed + r.packed;
  if (a.pack)
    group_copy(p, u, r.len, lane, c.lanes);
  else
    group_copy(u, p, r.len, lane, c.lanes);
}

// Source and destination of byte i of the tiny class.
LOOM_HD void tiny_ends(const SegArgs& a, int64_t i, const char** src, char** dst) {
  int64_t user, packed;
  tiny_item(a.geom, i, &user, &packed);
  char* u = a.user + user;
  char* p = a.packed + packed;
  *src = a.pack ? u : p;
  *dst = a.pack ? p : u;
}

}  // namespace loom::pack::gpu
