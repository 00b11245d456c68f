// loom-halo's geometry: one rank's block of a periodic 3D grid, its 26
// neighbours, the boxes their faces, edges and corners occupy, and the value
// every cell must hold. Plain index math compiled for the host and, in
// halo_cuda.cu, for the GPU: the hand-packed mode's pack and unpack and the
// verification are the same code on both.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HALO_HD __host__ __device__
#else
#define HALO_HD
#endif

namespace loom::halo {

inline constexpr int kDirections = 26;
// What halo cells hold before an exchange, and what row padding always holds.
inline constexpr double kStale = -1.0;
inline constexpr double kPadding = -2.0;

// One rank's storage: q quantities one after another, each a z-y-x array of
// doubles (x fastest) whose rows hold `pitch` doubles (cudaMalloc3D pads
// them), of which the first n[0] + 2r are cells. Array coordinates run over
// [0, n + 2r) on each axis; the interior is [r, n + r).
struct Geom {
  int n[3] = {0, 0, 0};  // interior cells along x, y, z
  int r = 1;             // halo radius
  int q = 1;             // quantities
  int64_t pitch = 0;     // doubles per row, >= n[0] + 2r

  HALO_HD int64_t ext(int axis) const { return n[axis] + 2 * r; }
  HALO_HD int64_t plane() const { return pitch * ext(1); }
  HALO_HD int64_t quantity() const { return plane() * ext(2); }
  HALO_HD int64_t total() const { return quantity() * q; }  // doubles allocated
  HALO_HD int64_t at(int qi, int64_t x, int64_t y, int64_t z) const {
    return qi * quantity() + z * plane() + y * pitch + x;
  }
};

// Where this rank's block lies: its coordinates in the grid of ranks and the
// global grid's extent (dims * n) on each axis.
struct Place {
  int c[3] = {0, 0, 0};
  int64_t global[3] = {0, 0, 0};
};

// A box of cells in array coordinates, the same box in every quantity.
struct Box {
  int lo[3] = {0, 0, 0};
  int len[3] = {0, 0, 0};
  HALO_HD int64_t cells() const { return int64_t{len[0]} * len[1] * len[2]; }
};

// Direction k in [0, 26) is (dx, dy, dz) in {-1, 0, 1}^3 without (0, 0, 0),
// x fastest; its opposite is 25 - k.
HALO_HD inline void direction(int k, int d[3]) {
  const int c = k < 13 ? k : k + 1;
  d[0] = c % 3 - 1;
  d[1] = c / 3 % 3 - 1;
  d[2] = c / 9 - 1;
}
HALO_HD inline int opposite(int k) {
  return kDirections - 1 - k;
}

// The interior cells that go towards direction k: the slab of width r along
// each axis the direction moves on, the whole interior along the others.
HALO_HD inline Box send_box(const Geom& g, int k) {
  int d[3];
  direction(k, d);
  Box b;
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = d[a] > 0 ? g.n[a] : g.r;
    b.len[a] = d[a] == 0 ? g.n[a] : g.r;
  }
  return b;
}

// The halo cells on the side of direction k (filled by the neighbour there).
HALO_HD inline Box halo_box(const Geom& g, int k) {
  int d[3];
  direction(k, d);
  Box b;
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = d[a] < 0 ? 0 : d[a] > 0 ? g.n[a] + g.r : g.r;
    b.len[a] = d[a] == 0 ? g.n[a] : g.r;
  }
  return b;
}

// Offset in the grid of element e of a box packed over all quantities,
// quantity slowest, then z, y, x: the order of a C-order subarray
// {q, z, y, x}, so the hand-packed bytes equal what MPI_Pack makes of it.
// I: the index type of the divisions (the GPU's 32-bit ones are cheaper).
template <class I>
HALO_HD inline int64_t packed_offset(const Geom& g, const Box& b, I e) {
  const I x = e % static_cast<I>(b.len[0]);
  e /= static_cast<I>(b.len[0]);
  const I y = e % static_cast<I>(b.len[1]);
  e /= static_cast<I>(b.len[1]);
  const I z = e % static_cast<I>(b.len[2]);
  const int qi = static_cast<int>(e / static_cast<I>(b.len[2]));
  return g.at(qi, b.lo[0] + int64_t{x}, b.lo[1] + int64_t{y}, b.lo[2] + int64_t{z});
}

// The value of quantity qi at global cell (gx, gy, gz): distinct positive
// integers, exact in a double for any grid that fits in memory.
HALO_HD inline double cell_value(const Place& p, int qi, int64_t gx, int64_t gy, int64_t gz) {
  return 1.0 + static_cast<double>(((qi * p.global[2] + gz) * p.global[1] + gy) * p.global[0] + gx);
}

// Element i of the allocation: its quantity and array coordinates.
struct Cell {
  int qi;
  int64_t x, y, z;
};
HALO_HD inline Cell cell_of(const Geom& g, int64_t i) {
  Cell c;
  c.x = i % g.pitch;
  i /= g.pitch;
  c.y = i % g.ext(1);
  i /= g.ext(1);
  c.z = i % g.ext(2);
  c.qi = static_cast<int>(i / g.ext(2));
  return c;
}

// What element i must hold: row padding kPadding; interior cells their
// value; halo cells kStale before an exchange (after == false) and, after
// one, the value of the periodic neighbour's cell they mirror.
HALO_HD inline double expected(const Geom& g, const Place& p, int64_t i, bool after) {
  const Cell c = cell_of(g, i);
  if (c.x >= g.ext(0)) return kPadding;
  const int64_t a[3] = {c.x, c.y, c.z};
  int64_t gl[3];
  bool halo = false;
  for (int k = 0; k < 3; ++k) {
    halo = halo || a[k] < g.r || a[k] >= g.n[k] + g.r;
    const int64_t v = int64_t{p.c[k]} * g.n[k] + (a[k] - g.r);
    gl[k] = (v % p.global[k] + p.global[k]) % p.global[k];
  }
  if (halo && !after) return kStale;
  return cell_value(p, c.qi, gl[0], gl[1], gl[2]);
}

// The hand-packed mode's message to (or from) each direction: its box and
// where its bytes start in the contiguous buffer, in doubles; offset[26]
// is the buffer's length. Passed to the GPU kernels by value.
struct Segments {
  Box box[kDirections];
  int64_t offset[kDirections + 1];
};

// The segments of all quantities' send boxes (send == true) or halo boxes.
inline Segments make_segments(const Geom& g, bool send) {
  Segments s;
  s.offset[0] = 0;
  for (int k = 0; k < kDirections; ++k) {
    s.box[k] = send ? send_box(g, k) : halo_box(g, k);
    s.offset[k + 1] = s.offset[k] + s.box[k].cells() * g.q;
  }
  return s;
}

}  // namespace loom::halo
