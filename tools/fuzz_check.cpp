#include "fuzz_check.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "loom/loom.h"
#include "mpi/runtime.hpp"
#include "pack/layout.hpp"
#include "type/canonical.hpp"
#include "type/from_mpi.hpp"

#if LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "pack/gpu_engine.hpp"
#endif

namespace loom::fuzz {
namespace {

struct Span {
  int64_t lo, hi;  // user-buffer bytes [lo, hi) that count elements may touch
};

Span span_of(MPI_Datatype t, int count) {
  MPI_Count size, tlb, text, lb, ext;
  MPI_Type_size_x(t, &size);
  if (size == 0) return {0, 0};  // MPIs give empty types sentinel bounds
  MPI_Type_get_true_extent_x(t, &tlb, &text);
  MPI_Type_get_extent_x(t, &lb, &ext);
  const int64_t shift = static_cast<int64_t>(std::max(count, 1) - 1) * ext;
  return {tlb + std::min<int64_t>(0, shift), tlb + text + std::max<int64_t>(0, shift)};
}

// True when two data bytes share an address: unpacking into such a layout is
// erroneous MPI, so only pack is compared then. Sorts the layout's blocks.
bool overlaps(const pack::LayoutView& v) {
  using pack::LayoutKind;
  if (v.kind != LayoutKind::kStrided && v.kind != LayoutKind::kBlocks) return false;
  std::vector<std::pair<int64_t, int64_t>> r;  // [begin, end)
  if (v.kind == LayoutKind::kStrided) {
    const int64_t n = v.total / v.block_len;
    r.reserve(n);
    for (int64_t b = 0; b < n; ++b) {
      const int64_t o = v.base + pack::dims_offset(v.dims, v.ndims, b);
      r.emplace_back(o, o + v.block_len);
    }
  } else {
    const int64_t tiles = v.total / v.tile_bytes;
    r.reserve(tiles * v.nblocks);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t o = v.base + pack::dims_offset(v.dims, v.ndims, t);
      for (int64_t b = 0; b < v.nblocks; ++b)
        if (v.blocks[b].len > 0)
          r.emplace_back(o + v.blocks[b].off, o + v.blocks[b].off + v.blocks[b].len);
    }
  }
  std::sort(r.begin(), r.end());
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i].first < r[i - 1].second) return true;
  return false;
}

#if LOOM_HAVE_CUDA
// Device memory reused from check to check (grown as needed).
struct DeviceBuf {
  void* p = nullptr;
  size_t n = 0;
  bool fit(size_t want) {
    if (want <= n) return true;
    if (p) cudaFree(p);
    p = nullptr;
    n = 0;
    if (cudaMalloc(&p, std::max<size_t>(want, 1 << 16)) != cudaSuccess) return false;
    n = std::max<size_t>(want, 1 << 16);
    return true;
  }
  unsigned char* at(int64_t off) const { return static_cast<unsigned char*>(p) + off; }
};

// The GPU engine on the same bytes: its pack must equal the MPI's packed
// bytes, its unpack the MPI's unpacked buffer (sentinels in the gaps).
std::string gpu_check(const pack::LayoutView& view, const std::vector<unsigned char>& src,
                      int64_t origin_off, const unsigned char* mpi_packed, int64_t bytes,
                      const std::vector<unsigned char>* mpi_unpacked, unsigned char sentinel) {
  static DeviceBuf user, packed;
  auto gl = pack::GpuLayout::create(view);
  if (!gl) return "GpuLayout::create: " + gl.status().message();
  if (!user.fit(src.size()) || !packed.fit(static_cast<size_t>(bytes) + 1))
    return "cudaMalloc failed";
  if (cudaMemcpy(user.p, src.data(), src.size(), cudaMemcpyHostToDevice) != cudaSuccess)
    return "cudaMemcpy failed";
  Status s = pack::gpu_pack_sync(*gl, user.at(origin_off), packed.p, nullptr);
  if (!s) return "gpu_pack: " + s.message();
  std::vector<unsigned char> got(static_cast<size_t>(bytes));
  if (bytes && cudaMemcpy(got.data(), packed.p, got.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
    return "cudaMemcpy failed";
  if (!std::equal(got.begin(), got.end(), mpi_packed))
    return "GPU packed bytes differ; " + gl->describe() + "; plan " +
           pack::gpu_plan(*gl, user.at(origin_off), packed.p, true);
  if (!mpi_unpacked) return "";
  std::vector<unsigned char> out(src.size(), sentinel);
  if (cudaMemcpy(user.p, out.data(), out.size(), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(packed.p, mpi_packed, static_cast<size_t>(bytes), cudaMemcpyHostToDevice) !=
          cudaSuccess)
    return "cudaMemcpy failed";
  s = pack::gpu_unpack_sync(*gl, packed.p, user.at(origin_off), nullptr);
  if (!s) return "gpu_unpack: " + s.message();
  if (cudaMemcpy(out.data(), user.p, out.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
    return "cudaMemcpy failed";
  if (out != *mpi_unpacked)
    return "GPU unpacked bytes differ (gaps included); " + gl->describe() + "; plan " +
           pack::gpu_plan(*gl, user.at(origin_off), packed.p, false);
  return "";
}
#endif

}  // namespace

bool gpu_usable() {
#if LOOM_HAVE_CUDA
  return pack::gpu_available();
#else
  return false;
#endif
}

std::string check(MPI_Datatype t, int count, uint64_t seed, bool has_op, const CheckOptions& opt,
                  CheckStats& stats) {
  ++stats.checks;
  Runtime* rt = runtime();
  if (!rt) return "Loom is not initialised";
  auto e = rt->types.lookup(t);
  if (!e) {
    if (e.status().code() == Err::kUnsupported) {
      ++stats.handed_back;
      return "";  // loom_pack is the MPI's own here: nothing to compare
    }
    return "Loom does not know the type: " + e.status().message();
  }
  const type::TypeInfo& info = e.value()->info;
  const std::string form = "; form " + type::to_string(info.form);

  // What Loom read back agrees with what the MPI says of the type.
  MPI_Count size, tlb, text, lb, ext;
  MPI_Type_size_x(t, &size);
  MPI_Type_get_true_extent_x(t, &tlb, &text);
  MPI_Type_get_extent_x(t, &lb, &ext);
  if (info.size != size)
    return "size " + std::to_string(info.size) + ", MPI says " + std::to_string(size) + form;
  if (info.extent != ext || info.lb != lb) return "lb/extent differ from the MPI's" + form;
  if (size > 0 && (info.true_lb != tlb || info.true_extent != text))
    return "true lb/extent differ from the MPI's" + form;
  if (info.form) {
    // The data lies inside the MPI's true bounds.
    const int64_t lo = info.form->disp + info.form->lo, hi = info.form->disp + info.form->hi;
    if (lo < tlb || hi > tlb + text) return "data outside the MPI's true bounds" + form;
  }
  int pack_size = 0;
  MPI_Pack_size(count, t, MPI_COMM_SELF, &pack_size);
  if (pack_size < static_cast<int64_t>(size) * count) return "MPI_Pack_size below the data";

  // Seeded source pattern with margins; the user pointer is the type's origin.
  const Span sp = span_of(t, count);
  const int64_t pad = 32;
  std::vector<unsigned char> src(static_cast<size_t>(sp.hi - sp.lo + 2 * pad));
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<unsigned char>((i * 131 + seed * 7) >> 1 ^ (i >> 8));
  const int64_t origin_off = pad - sp.lo;
  const unsigned char* origin = src.data() + origin_off;
  // The MPI's own pack and unpack (the oracle) work in a copy with wide
  // margins: Open MPI 4.1 reads past the data of some types (ASan: a read of
  // 144 bytes ran off the end of the 32-byte margin; depth 7, seed 90131724,
  // a struct of complex doubles and a resized darray of LONG_DOUBLE_INT).
  // Loom's engines keep the tight margins, where ASan sees any stray byte of
  // theirs.
  constexpr int64_t kOraclePad = 4096;
  std::vector<unsigned char> wide(src.size() + 2 * kOraclePad);
  std::copy(src.begin(), src.end(), wide.begin() + kOraclePad);
  const unsigned char* mpi_origin = wide.data() + kOraclePad + origin_off;

  const int pos0 = static_cast<int>(seed % 13);
  const int cap = pack_size + pos0 + 16;
  std::vector<unsigned char> mp(cap, 0xA5), lp(cap, 0xA5);
  int mpos = pos0, lpos = pos0;
  int rc = PMPI_Pack(mpi_origin, count, t, mp.data(), cap, &mpos, MPI_COMM_SELF);
  if (rc != MPI_SUCCESS) return "PMPI_Pack failed (" + std::to_string(rc) + ")";
  rc = loom_pack(origin, count, t, lp.data(), cap, &lpos, MPI_COMM_SELF);
  if (rc != MPI_SUCCESS) return "loom_pack failed (" + std::to_string(rc) + ")" + form;
  if (!opt.inject.empty() && has_op && size * count > 0) lp[pos0] ^= 0x40;
  if (lpos != mpos)
    return "loom_pack position " + std::to_string(lpos) + ", MPI's " + std::to_string(mpos);
  if (lpos - pos0 != static_cast<int64_t>(size) * count) return "packed size is not size x count";
  if (mp != lp) {
    // The standard defines `count` elements as elements `extent` apart. Where
    // the MPI's count pack disagrees with its own element-by-element pack,
    // the MPI contradicts itself: compare with the per-element answer.
    std::vector<unsigned char> ep(cap, 0xA5);
    int epos = pos0;
    for (int i = 0; i < count; ++i)
      PMPI_Pack(mpi_origin + i * ext, 1, t, ep.data(), cap, &epos, MPI_COMM_SELF);
    if (ep == mp || ep != lp) {
      size_t at = 0;
      while (at < mp.size() && mp[at] == lp[at]) ++at;
      return "packed bytes differ from byte " + std::to_string(static_cast<int64_t>(at) - pos0) +
             " of " + std::to_string(size * count) + form;
    }
    ++stats.mpi_self_inconsistent;
    return "";  // the unpack oracle is suspect for this type too
  }

  // The view the engines use for count elements (as loom_pack builds it).
  const auto& entry = e.value();
  pack::Layout owned;
  pack::LayoutView view;
  auto rv = pack::repeat_view(entry->layout, count, info.extent);
  if (rv) {
    view = rv.value();
  } else {
    auto l = pack::make_layout(type::repeat(info.form, count, info.extent));
    if (!l) return "make_layout: " + l.status().message();
    owned = std::move(l.value());
    view = owned.view();
  }
  const bool overlapping = overlaps(view);

  // Unpack the packed bytes into sentinel-filled buffers both ways.
  const unsigned char sentinel = static_cast<unsigned char>(0x3C + seed % 7);
  std::vector<unsigned char> mu(src.size(), sentinel), lu(src.size(), sentinel);
  const bool unpack = !overlapping && size > 0;  // MPICH 4.0.2 divides by zero on empty types
  if (unpack) {
    ++stats.unpacks;
    mpos = lpos = pos0;
    std::vector<unsigned char> mu_wide(mu.size() + 2 * kOraclePad, sentinel);
    rc = PMPI_Unpack(mp.data(), cap, &mpos, mu_wide.data() + kOraclePad + origin_off, count, t,
                     MPI_COMM_SELF);
    if (rc != MPI_SUCCESS) return "PMPI_Unpack failed (" + std::to_string(rc) + ")";
    std::copy(mu_wide.begin() + kOraclePad, mu_wide.begin() + kOraclePad + mu.size(), mu.begin());
    rc = loom_unpack(lp.data(), cap, &lpos, lu.data() + origin_off, count, t, MPI_COMM_SELF);
    if (rc != MPI_SUCCESS) return "loom_unpack failed (" + std::to_string(rc) + ")" + form;
    if (lpos != mpos) return "loom_unpack position differs from the MPI's";
    if (mu != lu) {
      size_t at = 0;
      while (at < mu.size() && mu[at] == lu[at]) ++at;
      return "unpacked bytes differ (gaps included) at buffer offset " +
             std::to_string(static_cast<int64_t>(at) - origin_off) + form;
    }
  } else if (size == 0) {
    // Nothing to move: every byte stays as it was.
    lpos = pos0;
    rc = loom_unpack(lp.data(), cap, &lpos, lu.data() + origin_off, count, t, MPI_COMM_SELF);
    if (rc != MPI_SUCCESS || lpos != pos0 || lu != mu) return "unpack of an empty type moved data";
  }

#if LOOM_HAVE_CUDA
  if (opt.gpu) {
    ++stats.gpu_checks;
    std::string g = gpu_check(view, src, origin_off, mp.data() + pos0, size * count,
                              unpack ? &mu : nullptr, sentinel);
    if (!g.empty()) return g + form;
  }
#endif
  return "";
}

}  // namespace loom::fuzz
