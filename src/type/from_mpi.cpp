#include "type/from_mpi.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "type/canonical.hpp"

namespace loom::type {
namespace {

#if MPI_VERSION >= 4
#define LOOM_MPI_LARGE_COUNT 1
#endif

constexpr int kMaxDepth = 64;

}  // namespace

bool is_predefined(MPI_Datatype t) {
  // The predefined types of C (and those every MPI defines): known without
  // asking the MPI, so a stale handle is never passed to it.
  // Commonest first: every host-buffer call of the interposer asks this.
  static const MPI_Datatype table[] = {MPI_BYTE,
                                       MPI_DOUBLE,
                                       MPI_INT,
                                       MPI_FLOAT,
                                       MPI_CHAR,
                                       MPI_SHORT,
                                       MPI_LONG,
                                       MPI_LONG_LONG_INT,
                                       MPI_LONG_LONG,
                                       MPI_SIGNED_CHAR,
                                       MPI_UNSIGNED_CHAR,
                                       MPI_UNSIGNED_SHORT,
                                       MPI_UNSIGNED,
                                       MPI_UNSIGNED_LONG,
                                       MPI_UNSIGNED_LONG_LONG,
                                       MPI_LONG_DOUBLE,
                                       MPI_WCHAR,
                                       MPI_C_BOOL,
                                       MPI_INT8_T,
                                       MPI_INT16_T,
                                       MPI_INT32_T,
                                       MPI_INT64_T,
                                       MPI_UINT8_T,
                                       MPI_UINT16_T,
                                       MPI_UINT32_T,
                                       MPI_UINT64_T,
                                       MPI_C_COMPLEX,
                                       MPI_C_FLOAT_COMPLEX,
                                       MPI_C_DOUBLE_COMPLEX,
                                       MPI_C_LONG_DOUBLE_COMPLEX,
                                       MPI_PACKED,
                                       MPI_AINT,
                                       MPI_OFFSET,
                                       MPI_COUNT,
                                       MPI_FLOAT_INT,
                                       MPI_DOUBLE_INT,
                                       MPI_LONG_INT,
                                       MPI_2INT,
                                       MPI_SHORT_INT,
                                       MPI_LONG_DOUBLE_INT};
  for (MPI_Datatype p : table)
    if (p == t) return true;
  return false;
}

bool is_named(MPI_Datatype t) {
  if (is_predefined(t)) return true;
  int comb = 0;
#ifdef LOOM_MPI_LARGE_COUNT
  MPI_Count ni, na, nc, nt;  // MPICH refuses the classic query on large-count types
  if (MPI_Type_get_envelope_c(t, &ni, &na, &nc, &nt, &comb) != MPI_SUCCESS) return false;
#else
  int ni, na, nt;
  if (MPI_Type_get_envelope(t, &ni, &na, &nt, &comb) != MPI_SUCCESS) return false;
#endif
  return comb == MPI_COMBINER_NAMED;
}

namespace {

// The arguments of one constructor, read back from the MPI. `seq` lists the
// integer, address and large-count arguments in the order of the classic
// (non-_c) call, which is how MPI-4 lays out the _c contents too, except for
// subarray and darray (fixed up in read_contents).
struct Contents {
  int combiner = 0;
  std::vector<int64_t> seq;
  std::vector<MPI_Datatype> types;
  Contents() = default;
  Contents(const Contents&) = delete;
  Contents& operator=(const Contents&) = delete;
  ~Contents() {
    // Handles returned by get_contents for derived types are new references.
    for (MPI_Datatype& t : types)
      if (!is_named(t)) MPI_Type_free(&t);
  }
};

Status mpi_fail(const char* what) {
  return Status(Err::kMpi, std::string(what) + " failed");
}

Status read_contents(MPI_Datatype t, Contents& c) {
#ifdef LOOM_MPI_LARGE_COUNT
  MPI_Count ni, na, nc, nt;
  if (MPI_Type_get_envelope_c(t, &ni, &na, &nc, &nt, &c.combiner) != MPI_SUCCESS)
    return mpi_fail("MPI_Type_get_envelope_c");
#else
  int ni, na, nt;
  const int nc = 0;
  if (MPI_Type_get_envelope(t, &ni, &na, &nt, &c.combiner) != MPI_SUCCESS)
    return mpi_fail("MPI_Type_get_envelope");
#endif
  if (c.combiner == MPI_COMBINER_NAMED) return Status::ok();
#ifdef MPI_COMBINER_F90_REAL
  if (c.combiner == MPI_COMBINER_F90_REAL || c.combiner == MPI_COMBINER_F90_COMPLEX ||
      c.combiner == MPI_COMBINER_F90_INTEGER)
    return Status::ok();  // parameterised named types: read like named ones
#endif
  std::vector<int> ints(ni);
  std::vector<MPI_Aint> aints(na);
  c.types.resize(nt);
#ifdef LOOM_MPI_LARGE_COUNT
  std::vector<MPI_Count> counts(nc);
  if (MPI_Type_get_contents_c(t, ni, na, nc, nt, ints.data(), aints.data(), counts.data(),
                              c.types.data()) != MPI_SUCCESS)
    return mpi_fail("MPI_Type_get_contents_c");
#else
  std::vector<int64_t> counts;
  if (MPI_Type_get_contents(t, ni, na, nt, ints.data(), aints.data(), c.types.data()) !=
      MPI_SUCCESS)
    return mpi_fail("MPI_Type_get_contents");
#endif
  if (nc > 0 && (c.combiner == MPI_COMBINER_SUBARRAY || c.combiner == MPI_COMBINER_DARRAY)) {
    // _c layout: subarray ints {ndims, order}, counts {sizes, subsizes, starts};
    // darray ints {size, rank, ndims, distribs, dargs, psizes, order}, counts {gsizes}.
    const size_t lead = c.combiner == MPI_COMBINER_SUBARRAY ? 1 : 3;
    if (ints.size() < lead + 1) return Status(Err::kUnsupported, "malformed large-count contents");
    c.seq.assign(ints.begin(), ints.begin() + lead);
    c.seq.insert(c.seq.end(), counts.begin(), counts.end());
    c.seq.insert(c.seq.end(), ints.begin() + lead, ints.end());
    return Status::ok();
  }
  c.seq.assign(ints.begin(), ints.end());
  c.seq.insert(c.seq.end(), aints.begin(), aints.end());
  c.seq.insert(c.seq.end(), counts.begin(), counts.end());
  return Status::ok();
}

// Overflow-tracking arithmetic for one translation.
struct Arith {
  bool overflow = false;
  int64_t mul(int64_t a, int64_t b) {
    int64_t r = 0;
    if (!checked_mul(a, b, &r)) overflow = true;
    return r;
  }
  int64_t add(int64_t a, int64_t b) {
    int64_t r = 0;
    if (!checked_add(a, b, &r)) overflow = true;
    return r;
  }
};

struct Translator {
  Arith ar;

  Result<int64_t> extent_of(MPI_Datatype t) {
    MPI_Count lb = 0, ext = 0;
    if (MPI_Type_get_extent_x(t, &lb, &ext) != MPI_SUCCESS)
      return mpi_fail("MPI_Type_get_extent_x");
    return static_cast<int64_t>(ext);
  }

  Result<NodePtr> named(MPI_Datatype t) {
    MPI_Count size = 0, tlb = 0, text = 0;
    if (MPI_Type_size_x(t, &size) != MPI_SUCCESS) return mpi_fail("MPI_Type_size_x");
    if (MPI_Type_get_true_extent_x(t, &tlb, &text) != MPI_SUCCESS)
      return mpi_fail("MPI_Type_get_true_extent_x");
    if (size == MPI_UNDEFINED) return Status(Err::kUnsupported, "named type of undefined size");
    if (size == 0 || size == text) return make_dense(size, tlb);
    if (t == MPI_SHORT_INT) {  // the one predefined pair type with a gap
      struct Pair {
        short a;
        int b;
      };
      return make_list({make_dense(sizeof(short), 0), make_dense(sizeof(int), offsetof(Pair, b))});
    }
    return Status(Err::kUnsupported, "named type with gaps that Loom does not know");
  }

  // count copies of `node` (one element of a type of extent ext) at ext apart:
  // the building block of vector, indexed and struct arguments.
  NodePtr run(int64_t count, int64_t ext, const NodePtr& node, int64_t disp = 0) {
    return make_strided(count, ext, node, disp);
  }

  // The per-dimension runs (start, length) of one process's part of a darray.
  static bool darray_runs(int64_t gsize, int distrib, int64_t darg, int64_t psize, int64_t coord,
                          std::vector<std::pair<int64_t, int64_t>>& runs) {
    if (psize <= 0 || gsize < 0) return false;
    if (distrib == MPI_DISTRIBUTE_NONE) {
      runs.push_back({0, gsize});
    } else if (distrib == MPI_DISTRIBUTE_BLOCK) {
      int64_t blk = darg == MPI_DISTRIBUTE_DFLT_DARG ? (gsize + psize - 1) / psize : darg;
      if (blk <= 0) return false;
      int64_t start = coord * blk;
      int64_t len = std::max<int64_t>(0, std::min(blk, gsize - start));
      runs.push_back({std::min(start, gsize), len});
    } else if (distrib == MPI_DISTRIBUTE_CYCLIC) {
      int64_t blk = darg == MPI_DISTRIBUTE_DFLT_DARG ? 1 : darg;
      if (blk <= 0) return false;
      for (int64_t s = coord * blk; s < gsize; s += psize * blk)
        runs.push_back({s, std::min(blk, gsize - s)});
    } else {
      return false;
    }
    return true;
  }

  Result<NodePtr> darray(const std::vector<int64_t>& a, const NodePtr& old, int64_t ext) {
    // {size, rank, ndims, gsizes[n], distribs[n], dargs[n], psizes[n], order}
    if (a.size() < 3) return Status(Err::kUnsupported, "malformed darray contents");
    const int64_t rank = a[1], n = a[2];
    if (n < 0 || a.size() != static_cast<size_t>(4 + 4 * n))
      return Status(Err::kUnsupported, "malformed darray contents");
    auto g = [&](int64_t i) { return a[3 + i]; };
    auto dist = [&](int64_t i) { return static_cast<int>(a[3 + n + i]); };
    auto darg = [&](int64_t i) { return a[3 + 2 * n + i]; };
    auto ps = [&](int64_t i) { return a[3 + 3 * n + i]; };
    const bool c_order = a[3 + 4 * n] == MPI_ORDER_C;
    // Process coordinates: the process grid is row-major whatever the order.
    std::vector<int64_t> coord(n);
    int64_t r = rank;
    for (int64_t i = n - 1; i >= 0; --i) {
      if (ps(i) <= 0) return Status(Err::kUnsupported, "darray with non-positive psize");
      coord[i] = r % ps(i);
      r /= ps(i);
    }
    // Build from the fastest-varying dimension outwards.
    NodePtr node = old;
    int64_t stride = ext;
    for (int64_t k = 0; k < n; ++k) {
      int64_t d = c_order ? n - 1 - k : k;
      std::vector<std::pair<int64_t, int64_t>> runs;
      if (!darray_runs(g(d), dist(d), darg(d), ps(d), coord[d], runs))
        return Status(Err::kUnsupported, "darray distribution Loom cannot read");
      std::vector<NodePtr> items;
      for (auto [start, len] : runs) items.push_back(run(len, stride, node, ar.mul(start, stride)));
      node = make_list(std::move(items));
      stride = ar.mul(stride, g(d));
    }
    return node;
  }

  Result<NodePtr> subarray(const std::vector<int64_t>& a, const NodePtr& old, int64_t ext) {
    // {ndims, sizes[n], subsizes[n], starts[n], order}
    if (a.empty()) return Status(Err::kUnsupported, "malformed subarray contents");
    const int64_t n = a[0];
    if (n < 0 || a.size() != static_cast<size_t>(2 + 3 * n))
      return Status(Err::kUnsupported, "malformed subarray contents");
    const bool c_order = a[1 + 3 * n] == MPI_ORDER_C;
    NodePtr node = old;
    int64_t stride = ext;
    for (int64_t k = 0; k < n; ++k) {
      int64_t d = c_order ? n - 1 - k : k;
      node = run(a[1 + n + d], stride, node, ar.mul(a[1 + 2 * n + d], stride));
      stride = ar.mul(stride, a[1 + d]);
    }
    return node;
  }

  Result<NodePtr> node_of(MPI_Datatype t, int depth) {
    if (t == MPI_DATATYPE_NULL) return Status(Err::kNullType, "MPI_DATATYPE_NULL");
    if (depth > kMaxDepth) return Status(Err::kUnsupported, "datatype nested too deeply");
    Contents c;
    LOOM_TRY(read_contents(t, c));
    const int comb = c.combiner;
    if (comb == MPI_COMBINER_NAMED) return named(t);
#ifdef MPI_COMBINER_F90_REAL
    if (comb == MPI_COMBINER_F90_REAL || comb == MPI_COMBINER_F90_COMPLEX ||
        comb == MPI_COMBINER_F90_INTEGER)
      return named(t);
#endif
    const auto& a = c.seq;
    auto need = [&](size_t n) { return a.size() >= n; };
    auto malformed = [&] { return Status(Err::kUnsupported, "malformed datatype contents"); };

    if (comb == MPI_COMBINER_STRUCT) {  // {count, blens[n], disps[n]} with one type per field
      if (!need(1) || a[0] < 0 || !need(1 + 2 * a[0]) || c.types.size() != (size_t)a[0])
        return malformed();
      std::vector<NodePtr> items;
      for (int64_t i = 0; i < a[0]; ++i) {
        auto child = node_of(c.types[i], depth + 1);
        if (!child) return child.status();
        auto ext = extent_of(c.types[i]);
        if (!ext) return ext.status();
        items.push_back(run(a[1 + i], ext.value(), child.value(), a[1 + a[0] + i]));
      }
      return make_list(std::move(items));
    }

    if (c.types.size() != 1) return Status(Err::kUnsupported, "unknown datatype combiner");
    auto old = node_of(c.types[0], depth + 1);
    if (!old) return old.status();
    auto ext_r = extent_of(c.types[0]);
    if (!ext_r) return ext_r.status();
    const int64_t ext = ext_r.value();
    const NodePtr& o = old.value();

    switch (comb) {
      case MPI_COMBINER_DUP:
      case MPI_COMBINER_RESIZED:  // the extent comes from the MPI, not the IR
        return o;
      case MPI_COMBINER_CONTIGUOUS:
        if (!need(1)) return malformed();
        return run(a[0], ext, o);
      case MPI_COMBINER_VECTOR:
      case MPI_COMBINER_HVECTOR: {
        if (!need(3)) return malformed();
        int64_t stride = comb == MPI_COMBINER_VECTOR ? ar.mul(a[2], ext) : a[2];
        return run(a[0], stride, run(a[1], ext, o));
      }
      case MPI_COMBINER_INDEXED:
      case MPI_COMBINER_HINDEXED: {
        if (!need(1) || a[0] < 0 || !need(1 + 2 * a[0])) return malformed();
        const int64_t n = a[0];
        std::vector<NodePtr> items;
        for (int64_t i = 0; i < n; ++i) {
          int64_t disp = comb == MPI_COMBINER_INDEXED ? ar.mul(a[1 + n + i], ext) : a[1 + n + i];
          items.push_back(run(a[1 + i], ext, o, disp));
        }
        return make_list(std::move(items));
      }
      case MPI_COMBINER_INDEXED_BLOCK:
      case MPI_COMBINER_HINDEXED_BLOCK: {
        if (!need(2) || a[0] < 0 || !need(2 + a[0])) return malformed();
        std::vector<NodePtr> items;
        for (int64_t i = 0; i < a[0]; ++i) {
          int64_t disp = comb == MPI_COMBINER_INDEXED_BLOCK ? ar.mul(a[2 + i], ext) : a[2 + i];
          items.push_back(run(a[1], ext, o, disp));
        }
        return make_list(std::move(items));
      }
      case MPI_COMBINER_SUBARRAY:
        return subarray(a, o, ext);
      case MPI_COMBINER_DARRAY:
        return darray(a, o, ext);
      default:
        return Status(Err::kUnsupported, "unknown datatype combiner");
    }
  }
};

}  // namespace

Result<TypeInfo> translate(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return Status(Err::kNullType, "MPI_DATATYPE_NULL");
  Translator tr;
  auto ir = tr.node_of(t, 0);
  if (!ir) return ir.status();
  if (tr.ar.overflow || ir.value()->overflow)
    return Status(Err::kOverflow, "datatype offsets or sizes do not fit in 64 bits");
  TypeInfo info;
  info.ir = ir.value();
  info.form = canonicalize(info.ir);
  MPI_Count size = 0, lb = 0, ext = 0, tlb = 0, text = 0;
  if (MPI_Type_size_x(t, &size) != MPI_SUCCESS ||
      MPI_Type_get_extent_x(t, &lb, &ext) != MPI_SUCCESS ||
      MPI_Type_get_true_extent_x(t, &tlb, &text) != MPI_SUCCESS)
    return mpi_fail("reading datatype extents");
  info.size = size;
  info.lb = lb;
  info.extent = ext;
  info.true_lb = tlb;
  info.true_extent = text;
  if (info.size != info.ir->size)
    return Status(Err::kInternal, "translated size differs from MPI_Type_size");
  return info;
}

}  // namespace loom::type
