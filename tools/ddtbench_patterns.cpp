// DDTBench's patterns as MPI datatypes (ddtbench_patterns.hpp). Each
// builder describes its code's data layout in its comment; arrays of the
// Fortran codes are written in their order (first index fastest).
#include "ddtbench_patterns.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

namespace loom::ddt {
namespace {

// Intermediate types of one builder, freed when it returns (the committed
// result keeps what it needs).
class Parts {
 public:
  ~Parts() {
    for (MPI_Datatype& t : held_) MPI_Type_free(&t);
  }
  MPI_Datatype operator()(MPI_Datatype t) {
    held_.push_back(t);
    return t;
  }
  // Hands t to the caller, who frees it.
  MPI_Datatype release(MPI_Datatype t) {
    held_.erase(std::remove(held_.begin(), held_.end(), t), held_.end());
    return t;
  }

 private:
  std::vector<MPI_Datatype> held_;
};

MPI_Datatype vector(Parts& p, int count, int block, int stride, MPI_Datatype old) {
  MPI_Datatype t;
  MPI_Type_vector(count, block, stride, old, &t);
  return p(t);
}
MPI_Datatype hvector(Parts& p, int count, int block, MPI_Aint stride, MPI_Datatype old) {
  MPI_Datatype t;
  MPI_Type_create_hvector(count, block, stride, old, &t);
  return p(t);
}
MPI_Datatype contiguous(Parts& p, int count, MPI_Datatype old) {
  MPI_Datatype t;
  MPI_Type_contiguous(count, old, &t);
  return p(t);
}
// `old` moved to byte offset `at`.
MPI_Datatype at(Parts& p, MPI_Aint at, MPI_Datatype old) {
  const int one = 1;
  MPI_Datatype t;
  MPI_Type_create_hindexed(1, &one, &at, old, &t);
  return p(t);
}
MPI_Datatype structure(Parts& p, const std::vector<MPI_Aint>& at,
                       const std::vector<MPI_Datatype>& types) {
  std::vector<int> ones(at.size(), 1);
  MPI_Datatype t;
  MPI_Type_create_struct(static_cast<int>(at.size()), ones.data(), at.data(), types.data(), &t);
  return p(t);
}
MPI_Datatype indexed_block(Parts& p, const std::vector<int>& idx, MPI_Datatype old) {
  MPI_Datatype t;
  MPI_Type_create_indexed_block(static_cast<int>(idx.size()), 1, idx.data(), old, &t);
  return p(t);
}
// A Fortran-order subarray.
MPI_Datatype subarray(Parts& p, const std::vector<int>& sizes, const std::vector<int>& sub,
                      const std::vector<int>& starts, MPI_Datatype old) {
  MPI_Datatype t;
  MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), sub.data(), starts.data(),
                           MPI_ORDER_FORTRAN, old, &t);
  return p(t);
}

// Points of an unstructured set that cross to the neighbour: a fixed
// pseudo-random subset, about one in `every`, in increasing order.
std::vector<int> chosen(int n, int every, uint64_t seed) {
  std::vector<int> idx;
  for (int i = 0; i < n; ++i) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    if (z % every == 0) idx.push_back(i);
  }
  if (idx.empty()) idx.push_back(0);
  return idx;
}

// MILC su3_zdown: a 4D lattice L^4 (x fastest, then y, z, t) of SU(3)
// vectors (3 single-precision complex numbers, 24 B). MILC works on one
// checkerboard parity at a time: the z-down neighbour needs the even sites
// (x + y + z + t even) of the plane z = 0, every other site of each row,
// starting at x = 0 or x = 1 as y + t alternates. Built as MILC-style
// nested vectors: rows, row pairs, planes of y, pairs of t.
MPI_Datatype milc_su3_zdown(Parts& p, int L) {
  const MPI_Aint site = 24, row = L * site, volume3 = MPI_Aint{L} * L * L * site;
  MPI_Datatype su3 = contiguous(p, 6, MPI_FLOAT);
  MPI_Datatype half_row = vector(p, L / 2, 1, 2, su3);  // every other site
  // Rows y (even) and y + 1: parities alternate along y, and along t.
  MPI_Datatype pair_even = structure(p, {0, row + site}, {half_row, half_row});
  MPI_Datatype pair_odd = structure(p, {site, row}, {half_row, half_row});
  MPI_Datatype plane_even = hvector(p, L / 2, 1, 2 * row, pair_even);
  MPI_Datatype plane_odd = hvector(p, L / 2, 1, 2 * row, pair_odd);
  // z = 0 of times t (even) and t + 1.
  MPI_Datatype t_pair = structure(p, {0, volume3}, {plane_even, plane_odd});
  return hvector(p, L / 2, 1, 2 * volume3, t_pair);
}

// NAS LU: u(5, L+2, L+2, L) in double, five solution components per point,
// one halo layer in i and j (LU splits the grid in x and y). The x
// neighbour gets u(1:5, 1, 1:L, k) for every k: blocks of 5 doubles, one
// per j; the y neighbour u(1:5, 1:L, 1, k): 5L contiguous doubles per k.
MPI_Datatype nas_lu(Parts& p, int L, bool x) {
  const int row = 5 * (L + 2);                         // doubles per j
  const MPI_Aint plane = MPI_Aint{row} * (L + 2) * 8;  // bytes per k
  const MPI_Aint start = (5 + MPI_Aint{row}) * 8;      // i = 1, j = 1
  MPI_Datatype per_k = x ? vector(p, L, 5, row, MPI_DOUBLE) : contiguous(p, 5 * L, MPI_DOUBLE);
  return at(p, start, hvector(p, L, 1, plane, per_k));
}

// NAS MG: u(L+2, L+2, L+2) in double with one halo layer on every side;
// comm3 sends each face's interior to the neighbours: for x, u(1, 1:L,
// 1:L), single doubles L+2 apart; for y, u(1:L, 1, 1:L), L contiguous
// doubles per k; for z, u(1:L, 1:L, 1), L contiguous doubles per j.
MPI_Datatype nas_mg(Parts& p, int L, int axis) {
  const int n = L + 2;
  const MPI_Aint plane = MPI_Aint{n} * n * 8;
  const MPI_Aint start = (1 + n + MPI_Aint{n} * n) * 8;  // (1, 1, 1)
  MPI_Datatype t;
  if (axis == 0) {
    t = hvector(p, L, 1, plane, vector(p, L, 1, n, MPI_DOUBLE));
  } else if (axis == 1) {
    t = vector(p, L, L, n * n, MPI_DOUBLE);
  } else {
    t = vector(p, L, L, n, MPI_DOUBLE);
  }
  return at(p, start, t);
}

// WRF: a halo exchange of several fields of one patch, in single precision:
// three 3D fields f(i, k, j) (i west-east fastest, k vertical, j south-north)
// and one 4D field of 4 moisture species f(i, k, j, s), each with a halo of
// 3 points in i and j around an L x L patch, km levels, one after another in
// memory. The x neighbour gets i in the first 3 interior columns, every k
// and interior j; the y neighbour the first 3 interior rows of j, every k
// and interior i. One struct over the fields, whose members are nested
// vectors (x_vec, y_vec) or subarrays (x_sa, y_sa), as WRF's two spellings.
MPI_Datatype wrf(Parts& p, int L, int km, bool x, bool subarrays) {
  const int w = 3, im = L + 2 * w, jm = L + 2 * w, species = 4;
  const MPI_Aint field = MPI_Aint{im} * km * jm * 4;
  const int ni = x ? w : L, nj = x ? L : w;  // the box sent, from (w, 0, w)
  MPI_Datatype one, four;
  if (subarrays) {
    one = subarray(p, {im, km, jm}, {ni, km, nj}, {w, 0, w}, MPI_FLOAT);
    four = subarray(p, {im, km, jm, species}, {ni, km, nj, species}, {w, 0, w, 0}, MPI_FLOAT);
  } else {
    MPI_Datatype box = hvector(p, nj, 1, MPI_Aint{im} * km * 4, vector(p, km, ni, im, MPI_FLOAT));
    one = at(p, (w + MPI_Aint{w} * im * km) * 4, box);
    four = hvector(p, species, 1, field, one);
  }
  return structure(p, {0, field, 2 * field, 3 * field}, {one, one, one, four});
}

// SPECFEM3D_GLOBE: the points of a slice's mesh shared with a neighbour
// slice are listed by index (the global numbering spreads them through
// memory); the outer core (oc) exchanges one float per point (a scalar
// potential), the crust-mantle (cm) three (a displacement vector). An
// indexed block type over the list; about one point in four of L^3 is on
// the list.
MPI_Datatype specfem3d(Parts& p, int L, bool crust_mantle) {
  const std::vector<int> idx = chosen(L * L * L, 4, crust_mantle ? 2 : 1);
  return indexed_block(p, idx, crust_mantle ? contiguous(p, 3, MPI_FLOAT) : MPI_FLOAT);
}

// LAMMPS: atoms that leave the subdomain go to the neighbour with all
// their per-atom data, which LAMMPS keeps in separate arrays: position
// x[n][3] and velocity v[n][3] (double), tag, type, mask and image (int);
// the full atom style adds the charge q (double) and the molecule id (int).
// One struct with an indexed block per array over the leaving atoms (about
// one in eight of n), the arrays one after another in memory.
MPI_Datatype lammps(Parts& p, int n, bool full) {
  const std::vector<int> idx = chosen(n, 8, full ? 4 : 3);
  MPI_Datatype vec3 = contiguous(p, 3, MPI_DOUBLE);
  MPI_Datatype xv = indexed_block(p, idx, vec3);
  MPI_Datatype ints = indexed_block(p, idx, MPI_INT);
  std::vector<MPI_Aint> offsets;
  std::vector<MPI_Datatype> types;
  MPI_Aint off = 0;
  auto add = [&](MPI_Datatype t, MPI_Aint bytes_per_atom) {
    offsets.push_back(off);
    types.push_back(t);
    off += bytes_per_atom * n;
  };
  add(xv, 24);
  add(xv, 24);
  for (int i = 0; i < 4; ++i) add(ints, 4);  // tag, type, mask, image
  if (full) {
    add(indexed_block(p, idx, MPI_DOUBLE), 8);  // q
    add(ints, 4);                               // molecule
  }
  return structure(p, offsets, types);
}

// 2D FFT: an L x L matrix of double complex distributed by rows over 4
// ranks; the transpose between the two 1D passes sends each rank an
// (L/4) x (L/4) block, which the receiver's type writes transposed: a
// column (L/4 elements L apart) resized to one element, L/4 of them.
MPI_Datatype fft(Parts& p, int L) {
  const int b = L / 4;
  MPI_Datatype column = vector(p, b, 1, L, MPI_C_DOUBLE_COMPLEX), one;
  MPI_Type_create_resized(column, 0, 16, &one);
  return contiguous(p, b, p(one));
}

struct Builder {
  const char* name;
  const char* what;
  std::function<MPI_Datatype(Parts&, double)> make;
};

// Scales a default size; at least lo, a multiple of `mult`.
int sized(int base, double scale, int lo, int mult = 1) {
  const int n = static_cast<int>(std::lround(base * scale));
  return std::max(lo, n / mult * mult);
}

const std::vector<Builder>& builders() {
  static const std::vector<Builder> all = {
      {"milc_su3_zdown", "MILC: even sites of the z = 0 plane of an L^4 lattice of SU(3) vectors",
       [](Parts& p, double s) { return milc_su3_zdown(p, sized(46, s, 2, 2)); }},
      {"nas_lu_x", "NAS LU: x face of u(5, L+2, L+2, L), 5 doubles per point",
       [](Parts& p, double s) { return nas_lu(p, sized(162, s, 2), true); }},
      {"nas_lu_y", "NAS LU: y face of u(5, L+2, L+2, L), 5L doubles per plane",
       [](Parts& p, double s) { return nas_lu(p, sized(162, s, 2), false); }},
      {"nas_mg_x", "NAS MG: x face of a (L+2)^3 grid, single doubles",
       [](Parts& p, double s) { return nas_mg(p, sized(364, s, 2), 0); }},
      {"nas_mg_y", "NAS MG: y face of a (L+2)^3 grid, rows of L doubles per plane",
       [](Parts& p, double s) { return nas_mg(p, sized(364, s, 2), 1); }},
      {"nas_mg_z", "NAS MG: z face of a (L+2)^3 grid, rows of L doubles",
       [](Parts& p, double s) { return nas_mg(p, sized(364, s, 2), 2); }},
      {"wrf_x_vec", "WRF: x halo of 3 3D + one 4D float fields, nested vectors",
       [](Parts& p, double s) { return wrf(p, sized(256, s, 4), sized(48, s, 2), true, false); }},
      {"wrf_y_vec", "WRF: y halo of 3 3D + one 4D float fields, nested vectors",
       [](Parts& p, double s) { return wrf(p, sized(256, s, 4), sized(48, s, 2), false, false); }},
      {"wrf_x_sa", "WRF: x halo of 3 3D + one 4D float fields, subarrays",
       [](Parts& p, double s) { return wrf(p, sized(256, s, 4), sized(48, s, 2), true, true); }},
      {"wrf_y_sa", "WRF: y halo of 3 3D + one 4D float fields, subarrays",
       [](Parts& p, double s) { return wrf(p, sized(256, s, 4), sized(48, s, 2), false, true); }},
      {"specfem3d_oc", "SPECFEM3D: outer core, 1 float at each listed point",
       [](Parts& p, double s) { return specfem3d(p, sized(100, s, 2), false); }},
      {"specfem3d_cm", "SPECFEM3D: crust-mantle, 3 floats at each listed point",
       [](Parts& p, double s) { return specfem3d(p, sized(70, s, 2), true); }},
      {"lammps_atomic", "LAMMPS: leaving atoms' x, v, tag, type, mask, image (atomic style)",
       [](Parts& p, double s) { return lammps(p, sized(131072, s * s, 16), false); }},
      {"lammps_full", "LAMMPS: leaving atoms' x, v, tag, type, mask, image, q, molecule",
       [](Parts& p, double s) { return lammps(p, sized(110376, s * s, 16), true); }},
      {"fft", "2D FFT: a transposed (L/4)^2 block of an L x L double complex matrix",
       [](Parts& p, double s) { return fft(p, sized(1024, s, 4, 4)); }},
  };
  return all;
}

}  // namespace

std::vector<std::string> pattern_names() {
  std::vector<std::string> names;
  for (const Builder& b : builders()) names.push_back(b.name);
  return names;
}

std::vector<Pattern> make_patterns(double scale, const std::vector<std::string>& only) {
  std::vector<Pattern> out;
  for (const Builder& b : builders()) {
    if (!only.empty() && std::find(only.begin(), only.end(), b.name) == only.end()) continue;
    Pattern pat{b.name, b.what, MPI_DATATYPE_NULL, 0};
    {
      Parts parts;
      pat.type = parts.release(b.make(parts, scale));
    }
    MPI_Type_commit(&pat.type);
    MPI_Aint lb = 0, extent = 0;
    MPI_Type_get_true_extent(pat.type, &lb, &extent);
    pat.span = static_cast<size_t>(lb + extent);
    out.push_back(pat);
  }
  return out;
}

void free_patterns(std::vector<Pattern>& patterns) {
  for (Pattern& p : patterns) MPI_Type_free(&p.type);
  patterns.clear();
}

}  // namespace loom::ddt
