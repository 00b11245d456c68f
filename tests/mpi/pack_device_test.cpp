// MPI_Pack / MPI_Unpack with device buffers, run in host-as-device mode
// (every buffer counts as device memory unless a test marks it host): the
// interposed calls against the MPI's own PMPI_Pack / PMPI_Unpack on host
// memory, byte for byte, gaps included, for device to device and both mixed
// cases, at offset positions and with several calls into one buffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "mpi/runtime.hpp"
#include "pack/layout.hpp"
#include "random_types.hpp"
#include "transport/memtype.hpp"
#include "type/canonical.hpp"

namespace loom::test {
namespace {

using Bytes = std::vector<unsigned char>;

enum Sides { kDevDev, kDevHost, kHostDev };  // (packed-from, packed-into) for pack
const char* side_name(Sides s) {
  return s == kDevDev ? "device->device" : s == kDevHost ? "device->host" : "host->device";
}

// Marks a buffer host memory for the test's lifetime (the mode's default is device).
struct HostMark {
  const void* p;
  HostMark(const void* q, size_t n, bool on) : p(on ? q : nullptr) {
    if (p) transport::test_mark_host(p, n);
  }
  ~HostMark() {
    if (p) transport::test_mark_host(p, 0);
  }
};

bool host_as_device() {
  int probe = 0;
  return runtime() && transport::memkind(&probe) == transport::MemKind::kDevice;
}

bool overlaps(MPI_Datatype t, int count) {
  auto e = runtime()->types.lookup(t);
  if (!e || !e.value()->info.form) return false;
  auto l = pack::make_layout(type::repeat(e.value()->info.form, count, e.value()->info.extent));
  if (!l) return false;
  std::vector<int64_t> offs;
  pack::LayoutView v = l->view();
  for (int64_t p = 0; p < l->total; ++p) offs.push_back(pack::packed_to_offset(v, p));
  std::sort(offs.begin(), offs.end());
  return std::adjacent_find(offs.begin(), offs.end()) != offs.end();
}

struct Span {
  int64_t lo, hi;
};
Span span_of(MPI_Datatype t, int count) {
  MPI_Count tlb, text, lb, ext;
  MPI_Type_get_true_extent_x(t, &tlb, &text);
  MPI_Type_get_extent_x(t, &lb, &ext);
  const int64_t shift = static_cast<int64_t>(std::max(count, 1) - 1) * ext;
  return {tlb + std::min<int64_t>(0, shift), tlb + text + std::max<int64_t>(0, shift)};
}

// Packs `count` elements then one more into one buffer at pos0, and unpacks
// both back, through the interposed calls and through the MPI's own.
void check(MPI_Datatype t, int count, uint64_t seed, const std::string& what, int* checked) {
  SCOPED_TRACE(what + " count " + std::to_string(count) + " seed " + std::to_string(seed));
  MPI_Count size = 0, lb = 0, ext = 0;
  MPI_Type_size_x(t, &size);
  MPI_Type_get_extent_x(t, &lb, &ext);
  const Span sp = span_of(t, count);
  const int64_t pad = 32;
  Bytes src(static_cast<size_t>(sp.hi - sp.lo + 2 * pad));
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<unsigned char>((i * 167 + seed) >> 2);
  const unsigned char* origin = src.data() + pad - sp.lo;
  int s1 = 0, s2 = 0;
  MPI_Pack_size(count, t, MPI_COMM_SELF, &s1);
  MPI_Pack_size(1, t, MPI_COMM_SELF, &s2);
  const int pos0 = static_cast<int>(seed % 11), cap = pos0 + s1 + s2 + 16;

  // The oracle: the MPI's own pack; where its count pack contradicts its
  // per-element pack (the standard's definition), the per-element one.
  Bytes mp(cap, 0xA5), ep(cap, 0xA5);
  int mpos = pos0, epos = pos0;
  ASSERT_EQ(PMPI_Pack(origin, count, t, mp.data(), cap, &mpos, MPI_COMM_SELF), MPI_SUCCESS);
  ASSERT_EQ(PMPI_Pack(origin, 1, t, mp.data(), cap, &mpos, MPI_COMM_SELF), MPI_SUCCESS);
  for (int i = 0; i < count; ++i)
    PMPI_Pack(origin + i * ext, 1, t, ep.data(), cap, &epos, MPI_COMM_SELF);
  PMPI_Pack(origin, 1, t, ep.data(), cap, &epos, MPI_COMM_SELF);
  ASSERT_EQ(mpos, pos0 + static_cast<int>(size) * (count + 1));
  const bool mpi_consistent = mp == ep;

  Bytes lp;
  for (Sides s : {kDevDev, kDevHost, kHostDev}) {
    SCOPED_TRACE(std::string("pack ") + side_name(s));
    lp.assign(cap, 0xA5);
    HostMark in(src.data(), src.size(), s == kHostDev), out(lp.data(), lp.size(), s == kDevHost);
    int lpos = pos0;
    ASSERT_EQ(MPI_Pack(origin, count, t, lp.data(), cap, &lpos, MPI_COMM_SELF), MPI_SUCCESS);
    ASSERT_EQ(MPI_Pack(origin, 1, t, lp.data(), cap, &lpos, MPI_COMM_SELF), MPI_SUCCESS);
    ASSERT_EQ(lpos, mpos);
    ASSERT_TRUE(lp == mp || (!mpi_consistent && lp == ep)) << "packed bytes differ";
  }
  ++*checked;
  if (!mpi_consistent || size == 0 || overlaps(t, count)) return;

  // Unpack both calls' bytes, in order, into sentinel-filled buffers.
  Bytes mu(src.size(), 0x3C);
  mpos = pos0;
  unsigned char* mo = mu.data() + pad - sp.lo;
  ASSERT_EQ(PMPI_Unpack(mp.data(), cap, &mpos, mo, count, t, MPI_COMM_SELF), MPI_SUCCESS);
  ASSERT_EQ(PMPI_Unpack(mp.data(), cap, &mpos, mo, 1, t, MPI_COMM_SELF), MPI_SUCCESS);
  for (Sides s : {kDevDev, kDevHost, kHostDev}) {  // (packed-from, unpacked-into)
    SCOPED_TRACE(std::string("unpack ") + side_name(s));
    Bytes lu(src.size(), 0x3C);
    unsigned char* lo = lu.data() + pad - sp.lo;
    HostMark in(mp.data(), mp.size(), s == kHostDev), out(lu.data(), lu.size(), s == kDevHost);
    int lpos = pos0;
    ASSERT_EQ(MPI_Unpack(mp.data(), cap, &lpos, lo, count, t, MPI_COMM_SELF), MPI_SUCCESS);
    ASSERT_EQ(MPI_Unpack(mp.data(), cap, &lpos, lo, 1, t, MPI_COMM_SELF), MPI_SUCCESS);
    ASSERT_EQ(lpos, mpos);
    ASSERT_TRUE(lu == mu) << "unpacked bytes differ (gaps included)";
  }
}

class PackDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!host_as_device()) GTEST_SKIP() << "needs LOOM_TEST_HOST_AS_DEVICE=1";
  }
};

TEST_F(PackDevice, RandomTypes) {
  const char* s = std::getenv("LOOM_TEST_SEED");
  const uint64_t base = s ? std::strtoull(s, nullptr, 10) : 20261124;
  const char* c = std::getenv("LOOM_TEST_CASES");
  const int n = c ? std::atoi(c) : 300;
  int checked = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t seed = base + i;
    RandomTypes gen(seed);
    MPI_Datatype t = gen.make(1 + static_cast<int>(seed % 4));
    MPI_Type_commit(&t);
    for (int count : {1, 2 + static_cast<int>(seed % 3)}) {
      check(t, count, seed, gen.recipe(), &checked);
      if (HasFatalFailure()) break;
    }
    MPI_Type_free(&t);
    if (HasFatalFailure()) {
      ADD_FAILURE() << "reproduce with LOOM_TEST_SEED=" << seed << " LOOM_TEST_CASES=1";
      return;
    }
  }
  EXPECT_EQ(checked, 2 * n);
}

TEST_F(PackDevice, HandPicked) {
  std::vector<std::pair<std::string, MPI_Datatype>> types;
  auto add = [&](const char* name, MPI_Datatype t) {
    MPI_Type_commit(&t);
    types.push_back({name, t});
  };
  MPI_Datatype t, u;
  types.push_back({"int", MPI_INT});
  MPI_Type_vector(100, 1, 64, MPI_DOUBLE, &t);  // TEMPI-like: 8 B blocks, 512 B stride
  add("vector 100x8B stride 512B", t);
  MPI_Type_vector(33, 5, 9, MPI_SHORT, &t);
  add("vector 33x5 short stride 9", t);
  int sz3[3] = {20, 30, 40}, sub3[3] = {5, 30, 1}, st3[3] = {2, 0, 39};
  MPI_Type_create_subarray(3, sz3, sub3, st3, MPI_ORDER_C, MPI_DOUBLE, &t);
  add("subarray 3D face", t);
  int bl[6] = {2, 2, 2, 2, 3, 4}, dp[6] = {1, 10, 18, 26, 40, 56};
  MPI_Type_indexed(6, bl, dp, MPI_FLOAT, &u);
  MPI_Type_create_resized(u, 0, 64 * 4, &t);
  MPI_Type_free(&u);
  add("indexed tiled, resized", t);
  MPI_Aint hdp[3] = {-24, 40, 8};
  int hbl[3] = {2, 1, 3};
  MPI_Type_create_hindexed(3, hbl, hdp, MPI_INT, &t);
  add("hindexed negative and unordered", t);
  int sbl[3] = {1, 3, 2};
  MPI_Aint sdp[3] = {0, 5, 24};
  MPI_Datatype sty[3] = {MPI_CHAR, MPI_SHORT, MPI_DOUBLE};
  MPI_Type_create_struct(3, sbl, sdp, sty, &t);
  add("struct with gaps", t);
  int checked = 0;
  for (auto& [name, type] : types) {
    for (int count : {0, 1, 3}) {
      check(type, count, 7 + count, name, &checked);
      if (HasFatalFailure()) return;
    }
    if (type != MPI_INT) MPI_Type_free(&type);
  }
  EXPECT_EQ(checked, 3 * static_cast<int>(types.size()));
}

int g_calls = 0, g_class = MPI_SUCCESS;
void counting_handler(MPI_Comm*, int* code, ...) {
  ++g_calls;
  MPI_Error_class(*code, &g_class);
}

// Too little room: MPI_ERR_TRUNCATE through the handler, position unchanged,
// output untouched, on every mix of sides.
TEST_F(PackDevice, TruncateThroughTheHandler) {
  MPI_Comm comm;
  MPI_Errhandler eh;
  MPI_Comm_dup(MPI_COMM_SELF, &comm);
  MPI_Comm_create_errhandler(counting_handler, &eh);
  MPI_Comm_set_errhandler(comm, eh);
  MPI_Datatype t;
  MPI_Type_vector(16, 2, 5, MPI_INT, &t);
  MPI_Type_commit(&t);
  const int bytes = 16 * 2 * 4 * 2;  // two elements
  Bytes in(2 * 5 * 16 * 4, 7), out(bytes + 4, 0xA5), dst(in.size(), 0);
  for (Sides s : {kDevDev, kDevHost, kHostDev}) {
    SCOPED_TRACE(side_name(s));
    // Pack: (in, out) by s; unpack: (out, dst) by s, host->device read as device->host.
    HostMark a(in.data(), in.size(), s == kHostDev), b(out.data(), out.size(), s == kDevHost),
        c(dst.data(), dst.size(), s == kHostDev);
    g_calls = 0;
    int pos = 5, cls = MPI_SUCCESS;
    int rc = MPI_Pack(in.data(), 2, t, out.data(), pos + bytes - 1, &pos, comm);
    MPI_Error_class(rc, &cls);
    EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
    EXPECT_EQ(g_calls, 1);
    EXPECT_EQ(g_class, MPI_ERR_TRUNCATE);
    EXPECT_EQ(pos, 5);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](unsigned char x) { return x == 0xA5; }));
    g_calls = 0;
    rc = MPI_Unpack(out.data(), pos + bytes - 1, &pos, dst.data(), 2, t, comm);
    MPI_Error_class(rc, &cls);
    EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
    EXPECT_EQ(g_calls, 1);
    EXPECT_EQ(pos, 5);
    EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](unsigned char x) { return x == 0; }));
  }
  MPI_Type_free(&t);
  MPI_Errhandler_free(&eh);
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace loom::test
