#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>

#include "model/coll_choice.hpp"
#include "model/cost.hpp"
#include "model/curve.hpp"
#include "model/profile.hpp"
#include "util/knobs.hpp"

namespace loom::model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Relative closeness, for values computed through log/exp or fits.
void expect_rel(double got, double want, double tol = 1e-12) {
  EXPECT_NEAR(got, want, tol * std::max(1.0, std::fabs(want))) << "want " << want;
}

Curve sample(const std::vector<double>& xs, const std::function<double(double)>& f) {
  Curve c;
  for (double x : xs) {
    c.bytes.push_back(x);
    c.usec.push_back(f(x));
    c.spread.push_back(0.01);
  }
  return c;
}

std::vector<double> pow2(int lo, int hi) {  // 2^lo .. 2^hi
  std::vector<double> v;
  for (int k = lo; k <= hi; ++k) v.push_back(std::ldexp(1.0, k));
  return v;
}

// ---------------------------------------------------------------- Curve

TEST(Curve, ExactAtPoints) {
  Curve c = sample({8, 64, 1000, 4096}, [](double x) { return 1.5 + x * 0.003; });
  for (size_t i = 0; i < c.bytes.size(); ++i) EXPECT_EQ(c.at(c.bytes[i]), c.usec[i]);
}

TEST(Curve, PowerLawIsReproducedBetweenPoints) {
  auto f = [](double x) { return 3 * std::pow(x, 0.37); };
  Curve c = sample({1, 10, 100, 1e4, 1e6}, f);
  for (double x : {2.0, 5.0, 33.0, 99.0, 150.0, 5e3, 123456.0}) expect_rel(c.at(x), f(x));
}

TEST(Curve, ClampsBelowFirstPoint) {
  Curve c = sample({64, 128}, [](double x) { return x / 8; });
  EXPECT_EQ(c.at(1), 8.0);
  EXPECT_EQ(c.at(0), 8.0);
  EXPECT_EQ(c.at(-5), 8.0);
}

TEST(Curve, ZeroTimesInterpolateLinearly) {
  Curve c;
  c.bytes = {1, 10, 100};
  c.usec = {0, 0, 5};
  EXPECT_EQ(c.at(5), 0.0);
  expect_rel(c.at(55), 2.5);
  EXPECT_EQ(c.at(100), 5.0);
}

TEST(Curve, ExtrapolatesWithFittedSlope) {
  // Upper half linear with slope 0.01; the lower half (a different law) does not count.
  std::vector<double> xs = pow2(0, 19);
  Curve c = sample(xs, [](double x) { return x < 1024 ? 1 + std::sqrt(x) : 7 + 0.01 * x; });
  expect_rel(c.tail_slope(), 0.01, 1e-9);
  double last = xs.back();
  expect_rel(c.at(4 * last), c.usec.back() + 3 * last * 0.01, 1e-9);
}

TEST(Curve, SlopeNeverNegativeAndEmptyIsUnusable) {
  Curve down = sample({1, 2, 4, 8}, [](double x) { return 10 - x; });
  EXPECT_EQ(down.tail_slope(), 0.0);
  EXPECT_EQ(down.at(100), 2.0);
  Curve one = sample({16}, [](double) { return 3.0; });
  EXPECT_EQ(one.at(1e9), 3.0);
  EXPECT_TRUE(Curve{}.empty());
  EXPECT_EQ(Curve{}.at(10), kInf);
}

TEST(Curve, FitLinearRecoversTruth) {
  Curve c = sample(pow2(0, 30), [](double x) { return 2.5 + 1.25e-4 * x; });
  LinearFit f = fit_linear(c);
  expect_rel(f.a_us, 2.5, 1e-9);
  expect_rel(f.b_us_per_byte, 1.25e-4, 1e-9);
  EXPECT_LT(f.max_rel_err, 1e-9);

  // min_bytes leaves out the points below it.
  Curve bent = sample(pow2(0, 20), [](double x) { return x < 4096 ? 100.0 : 4 + 0.5 * x; });
  LinearFit g = fit_linear(bent, 4096);
  expect_rel(g.a_us, 4, 1e-9);
  expect_rel(g.b_us_per_byte, 0.5, 1e-9);
  EXPECT_GT(fit_linear(bent).max_rel_err, 0.1);

  LinearFit none = fit_linear(Curve{});
  EXPECT_EQ(none.a_us, 0.0);
  EXPECT_EQ(none.b_us_per_byte, 0.0);
}

TEST(Curve, LogGOPFitReproducesLinearTruth) {
  const LogGOP t{1.5, 0.7, 2.0, 1e-4, 2e-5};  // L o g G O
  std::vector<double> xs = pow2(0, 24);
  auto truth = [&](double n) { return t.L + 2 * t.o + (n - 1) * (t.G + 2 * t.O); };
  Curve pp = sample(xs, truth);
  Curve ov = sample(xs, [&](double n) { return t.o + (n - 1) * t.O; });
  Curve gap = sample(xs, [&](double n) { return t.g + (n - 1) * t.G; });
  LogGOP p = fit_loggop(pp, ov, gap);
  expect_rel(p.L, t.L, 1e-9);
  expect_rel(p.o, t.o, 1e-9);
  expect_rel(p.g, t.g, 1e-9);
  expect_rel(p.G, t.G, 1e-9);
  expect_rel(p.O, t.O, 1e-9);
  for (double n : {1.0, 100.0, 65536.0, 3e7}) expect_rel(loggop_time(p, n), truth(n), 1e-9);

  // Without overhead and gap: o = O = g = 0, all of the pingpong is L and G.
  LogGOP q = fit_loggop(pp, Curve{}, Curve{});
  EXPECT_EQ(q.o, 0.0);
  EXPECT_EQ(q.O, 0.0);
  EXPECT_EQ(q.g, 0.0);
  expect_rel(q.L, t.L + 2 * t.o, 1e-9);
  expect_rel(q.G, t.G + 2 * t.O, 1e-9);
  EXPECT_EQ(fit_loggop(Curve{}, Curve{}, Curve{}), LogGOP{});
}

TEST(Curve, SurfaceInterpolatesInLogBlock) {
  Surface s;
  s.block = {8, 512};
  s.by_block = {sample({1, 1e6}, [](double x) { return 10 * x; }),
                sample({1, 1e6}, [](double x) { return x; })};
  EXPECT_EQ(s.at(8, 1e6), 1e7);
  EXPECT_EQ(s.at(512, 1e6), 1e6);
  expect_rel(s.at(8, 1000), 10000.0);
  expect_rel(s.at(64, 1000), 5500.0);  // log-midway between 8 and 512
  expect_rel(s.at(1, 1000), 10000.0);  // clamped
  expect_rel(s.at(1e6, 1000), 1000.0);
  Surface bad = s;
  bad.by_block[1] = Curve{};
  EXPECT_TRUE(bad.empty());
  EXPECT_EQ(bad.at(64, 1000), kInf);
  EXPECT_TRUE(Surface{}.empty());
}

// ---------------------------------------------------------------- Model

// Terms a + b*n sampled at powers of two, so the model's sums are exact there.
Curve lin(double a, double b) {
  return sample(pow2(0, 26), [=](double n) { return a + b * n; });
}
Surface flat(double a, double b) {  // same at every block length
  Surface s;
  s.block = {8, 4096};
  s.by_block = {lin(a, b), lin(a, b)};
  return s;
}

// Per-byte costs chosen for clean crossovers (see the tests).
Profile synthetic() {
  Profile p;
  p.id = {"Test GPU", "Test MPI 1.0"};
  p.surfaces[term::kPackDev] = flat(1, 1e-5);
  p.surfaces[term::kUnpackDev] = flat(1, 1e-5);
  p.surfaces[term::kPackHost] = flat(2, 1e-3);
  p.surfaces[term::kUnpackHost] = flat(2, 1e-3);
  p.curves[term::kD2H] = lin(5, 5e-5);
  p.curves[term::kH2D] = lin(5, 5e-5);
  p.curves[term::kMpiOnNode] = lin(3, 1e-4);
  p.curves[term::kMpiOffNode] = lin(6, 2e-4);
  p.curves[term::kIpcCopy] = lin(30, 2e-5);
  p.scalars[term::kOverheadDevice] = 3;
  p.scalars[term::kOverheadOneshot] = 1;
  p.scalars[term::kOverheadStaged] = 2;
  p.scalars[term::kHeaderBytes] = 128;
  return p;
}

Shape shape(double n, bool on_node = true, bool device = true) {
  Shape s;
  s.bytes = n;
  s.block_bytes = 8;
  s.on_node = on_node;
  s.device_allowed = device;
  return s;
}

double us(const Prediction& p, Method m) {
  return p.usec[static_cast<int>(m)];
}

TEST(Model, FormulasByHand) {
  Model m(synthetic());
  EXPECT_TRUE(m.missing().empty());
  const double n = 65536;
  Prediction p = m.predict(shape(n));
  const double mpi = 3 + 1e-4 * n;
  expect_rel(us(p, Method::kOneShot), 1 + 2 * (2 + 1e-3 * n) + mpi);
  expect_rel(us(p, Method::kStaged), 2 + 2 * (1 + 1e-5 * n) + 2 * (5 + 5e-5 * n) + mpi);
  expect_rel(us(p, Method::kDevice), 3 + 2 * (1 + 1e-5 * n) + (3 + 1e-4 * 128) + 30 + 2e-5 * n);
  Prediction off = m.predict(shape(n, false));
  expect_rel(us(off, Method::kStaged), 2 + 2 * (1 + 1e-5 * n) + 2 * (5 + 5e-5 * n) + 6 + 2e-4 * n);
}

// A contiguous device message is copied from the peer straight into place:
// the device method has no unpack term then.
TEST(Model, ContiguousDeviceMessageHasNoUnpack) {
  Model m(synthetic());
  const double n = 65536;
  Shape s = shape(n);
  s.contiguous = true;
  expect_rel(us(m.predict(s), Method::kDevice),
             3 + (1 + 1e-5 * n) + (3 + 1e-4 * 128) + 30 + 2e-5 * n);
}

// A method's scale multiplies its summed terms (not its overhead); the
// packed scale falls back to the contiguous one.
TEST(Model, ScaleMultipliesTheTerms) {
  Profile p = synthetic();
  const double n = 65536;
  Shape packed = shape(n);
  const double terms = us(Model(p).predict(packed), Method::kDevice) - 3;
  p.scalars[term::kScaleDevice] = 0.5;
  expect_rel(us(Model(p).predict(packed), Method::kDevice), 3 + 0.5 * terms);
  p.scalars[term::kScaleDevicePacked] = 0.8;
  expect_rel(us(Model(p).predict(packed), Method::kDevice), 3 + 0.8 * terms);
  Shape contiguous = shape(n);
  contiguous.contiguous = true;
  const double cterms = us(Model(synthetic()).predict(contiguous), Method::kDevice) - 3;
  expect_rel(us(Model(p).predict(contiguous), Method::kDevice), 3 + 0.5 * cterms);
}

// A negative overhead (terms timed alone overlap on the real path) lowers
// the sum, but a method never takes less than its slowest term.
TEST(Model, NegativeOverheadStopsAtTheSlowestTerm) {
  Profile p = synthetic();
  p.scalars[term::kOverheadOneshot] = -4;
  Model m(p);
  const double n = 65536, mpi = 3 + 1e-4 * n, pack = 2 + 1e-3 * n;
  expect_rel(us(m.predict(shape(n)), Method::kOneShot), -4 + 2 * pack + mpi);
  p.scalars[term::kOverheadOneshot] = -1e6;
  Model floor(p);
  expect_rel(us(floor.predict(shape(n)), Method::kOneShot), std::max(pack, mpi));
}

// Messages Loom packs take the *_packed overheads where the profile has
// them; contiguous ones (and profiles without them) the plain ones.
TEST(Model, PackedMessagesTakeTheirOwnOverhead) {
  Profile p = synthetic();
  const double n = 65536;
  Shape packed = shape(n);
  packed.contiguous = false;
  packed.block_bytes = 8;
  const double before = us(Model(p).predict(packed), Method::kStaged);
  p.scalars[term::kOverheadStagedPacked] = p.scalars[term::kOverheadStaged] + 5;
  Model m(p);
  expect_rel(us(m.predict(packed), Method::kStaged), before + 5);
  Shape contiguous = shape(n);
  contiguous.contiguous = true;
  expect_rel(us(m.predict(contiguous), Method::kStaged),
             us(Model(synthetic()).predict(contiguous), Method::kStaged));
}

// Staged in k chunks of c bytes: the copies and sends overlap, so the three
// middle terms become d2h(c) + mpi(c) + h2d(c) + (k - 1) max of them.
TEST(Model, PipelinedStagedOverlapsItsChunks) {
  Model m(synthetic());
  const double n = double(1 << 24), c = double(1 << 20);
  Shape whole = shape(n), piped = shape(n);
  piped.chunk_bytes = c;
  const double d = 5 + 5e-5 * c, t = 3 + 1e-4 * c;  // d2h = h2d, mpi
  const double pack = 1 + 1e-5 * n;
  expect_rel(us(m.predict(piped), Method::kStaged), 2 + 2 * pack + d + t + d + 15 * std::max(d, t));
  EXPECT_LT(us(m.predict(piped), Method::kStaged), us(m.predict(whole), Method::kStaged));
  piped.chunk_bytes = 2 * n;  // one chunk: as a whole message
  expect_rel(us(m.predict(piped), Method::kStaged), us(m.predict(whole), Method::kStaged));
}

// oneshot - staged = (5 + 2e-3 n) - (14 + 1.2e-4 n) = 0 at n = 9 / 1.88e-3 = 4787.2:
// oneshot wins below, staged above (device not allowed).
TEST(Model, OneshotStagedCrossover) {
  Model m(synthetic());
  for (double n : {1.0, 256.0, 4096.0}) {
    EXPECT_EQ(m.predict(shape(n, true, false)).best, Method::kOneShot) << n;
    EXPECT_EQ(m.predict(shape(n, false)).best, Method::kOneShot) << n;
  }
  for (double n : {8192.0, 1048576.0, 1e9}) {
    EXPECT_EQ(m.predict(shape(n, true, false)).best, Method::kStaged) << n;
    EXPECT_EQ(m.predict(shape(n, false)).best, Method::kStaged) << n;
  }
}

// On node: device = 3 + 2(1 + 1e-5 n) + (3 + 1e-4 * 128) + 30 + 2e-5 n = 38.0128 + 4e-5 n,
// staged = 14 + 1.2e-4 n + (3 + 1e-4 n) = 17 + 2.2e-4 n: equal at n = 21.0128 / 1.8e-4 =
// 116738.2. So oneshot below 4787.2, staged up to 116738.2, device above.
TEST(Model, DeviceCrossover) {
  Model m(synthetic());
  EXPECT_EQ(m.predict(shape(4096)).best, Method::kOneShot);
  EXPECT_EQ(m.predict(shape(8192)).best, Method::kStaged);
  EXPECT_EQ(m.predict(shape(65536)).best, Method::kStaged);
  EXPECT_EQ(m.predict(shape(131072)).best, Method::kDevice);
  EXPECT_EQ(m.predict(shape(1 << 26)).best, Method::kDevice);
  EXPECT_EQ(m.predict(shape(1 << 26, true, false)).best, Method::kStaged);
}

TEST(Model, DeviceUnusableOffNodeSmallOrNotAllowed) {
  Model m(synthetic());
  EXPECT_EQ(us(m.predict(shape(1 << 20, false, true)), Method::kDevice), kInf);
  EXPECT_EQ(us(m.predict(shape(1 << 20, true, false)), Method::kDevice), kInf);
  EXPECT_EQ(us(m.predict(shape(127)), Method::kDevice), kInf);
  EXPECT_LT(us(m.predict(shape(128)), Method::kDevice), kInf);
  Profile big = synthetic();
  big.scalars[term::kHeaderBytes] = 1024;
  EXPECT_EQ(us(Model(big).predict(shape(1000)), Method::kDevice), kInf);
  Profile dflt = synthetic();
  dflt.scalars.erase(term::kHeaderBytes);  // 128 by default, and not a missing term
  Model d(dflt);
  EXPECT_TRUE(d.missing().empty());
  EXPECT_EQ(us(d.predict(shape(127)), Method::kDevice), kInf);
  EXPECT_LT(us(d.predict(shape(128)), Method::kDevice), kInf);
}

TEST(Model, ContiguousUsesMessageSizeAsBlock) {
  Profile p = synthetic();
  p.surfaces[term::kPackHost].by_block[0] = lin(100, 1e-3);  // slow for small blocks
  Model m(p);
  Shape s = shape(65536, true, false);
  s.block_bytes = 0;
  s.contiguous = true;
  const double mpi = 3 + 1e-4 * 65536;
  expect_rel(us(m.predict(s), Method::kOneShot), 1 + 2 * (2 + 1e-3 * 65536) + mpi);
  s.contiguous = false;
  s.block_bytes = 8;
  expect_rel(us(m.predict(s), Method::kOneShot),
             1 + (100 + 1e-3 * 65536) + (2 + 1e-3 * 65536) + mpi);
}

TEST(Model, MissingTermsMakeMethodsUnusable) {
  Profile p = synthetic();
  p.surfaces.erase(term::kPackHost);
  p.curves.erase(term::kIpcCopy);
  p.scalars.erase(term::kOverheadStaged);
  Model m(p);
  EXPECT_EQ(m.missing(), (std::vector<std::string>{"pack_host", "ipc_copy", "overhead_staged"}));
  Prediction r = m.predict(shape(1 << 20));
  EXPECT_EQ(us(r, Method::kOneShot), kInf);
  EXPECT_EQ(us(r, Method::kStaged), kInf);
  EXPECT_EQ(us(r, Method::kDevice), kInf);
  EXPECT_EQ(r.best, Method::kStaged);  // the safe default

  Model empty(Profile{});
  EXPECT_EQ(empty.missing().size(), 12u);
  EXPECT_EQ(empty.predict(shape(100)).best, Method::kStaged);

  Profile no_staged = synthetic();
  no_staged.curves.erase(term::kD2H);
  EXPECT_EQ(Model(no_staged).predict(shape(1 << 20, false)).best, Method::kOneShot);
}

TEST(Model, OffNodeFallsBackToOnNodeMpi) {
  Profile p = synthetic();
  p.curves.erase(term::kMpiOffNode);
  Model m(p);
  EXPECT_EQ(m.missing(), std::vector<std::string>{"mpi_off_node"});
  Prediction on = m.predict(shape(65536, true, false));
  Prediction off = m.predict(shape(65536, false, false));
  EXPECT_EQ(us(on, Method::kStaged), us(off, Method::kStaged));
  EXPECT_EQ(us(on, Method::kOneShot), us(off, Method::kOneShot));
  EXPECT_LT(us(off, Method::kStaged), kInf);
}

TEST(Model, ExplainSortsAndShowsUnusable) {
  Prediction p;
  p.usec[static_cast<int>(Method::kOneShot)] = 45.6;
  p.usec[static_cast<int>(Method::kStaged)] = 78.9;
  p.usec[static_cast<int>(Method::kDevice)] = 12.34;
  p.best = Method::kDevice;
  EXPECT_EQ(p.explain(), "device 12.3 us < oneshot 45.6 us < staged 78.9 us");
  p.usec[static_cast<int>(Method::kDevice)] = kInf;
  p.usec[static_cast<int>(Method::kOneShot)] = 2.5;
  EXPECT_EQ(p.explain(), "oneshot 2.50 us < staged 78.9 us < device n/a");
  Prediction none;
  EXPECT_EQ(none.explain(),
            "oneshot n/a = staged n/a = device n/a (none usable: staged by default)");
  EXPECT_STREQ(method_name(Method::kOneShot), "oneshot");
  EXPECT_STREQ(method_name(Method::kStaged), "staged");
  EXPECT_STREQ(method_name(Method::kDevice), "device");
}

// ---------------------------------------------------------------- Profile

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "loom-model-XXXXXX").string();
    path_ = mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

// The body with its checksum line made right again: edits that pass the checksum.
std::string resum(const std::string& body) {
  char sum[40];
  std::snprintf(sum, sizeof sum, "checksum %016" PRIx64 "\n", fnv1a64(body));
  return body + sum;
}

std::string without_checksum(const std::string& data) {
  return data.substr(0, data.rfind("checksum "));
}

Profile full_profile() {
  Profile p = synthetic();
  p.id.gpu = "NVIDIA H200";
  p.id.mpi = "MPICH Version:\t4.0.2\nMPICH Release date: Thu Mar 3 2022\\ end \x01";
  p.host = "node-17";
  p.date = "";
  p.loom_version = "0.1";
  p.curves[term::kD2H].usec[3] = 0.1;
  p.curves[term::kD2H].spread[2] = 1.0 / 3;
  p.curves[term::kH2D].usec[0] = 1e-300;
  p.curves["empty"] = Curve{};
  p.loggop["mpi"] = {1.0 / 3, 0.7, 2.0, 1e-4, 2e-5};
  p.scalars["pi"] = M_PI;
  p.scalars["huge"] = 1.7976931348623157e308;
  p.scalars["neg"] = -0.125;
  return p;
}

TEST(Profile, RoundTripIsExact) {
  TempDir dir;
  std::string path = dir.path() + "/a/b/profile.txt";  // directories are made
  Profile p = full_profile();
  ASSERT_TRUE(write_profile(path, p).is_ok());
  Result<Profile> r = read_profile(path, &p.id);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(*r == p);
  EXPECT_EQ(r->id.mpi, p.id.mpi);
  EXPECT_EQ(r->curves.at(term::kH2D).usec[0], 1e-300);
  EXPECT_EQ(r->scalars.at("pi"), M_PI);
  // The file is text, starts with the magic and ends with the checksum.
  std::string data = slurp(path);
  EXPECT_EQ(data.rfind("loom-profile 1\n", 0), 0u);
  EXPECT_NE(data.find("\ngpu NVIDIA H200\n"), std::string::npos);
  EXPECT_NE(data.rfind("\nchecksum "), std::string::npos);
  // Writing again replaces it, and leaves no temporary file behind.
  p.host = "node-18";
  ASSERT_TRUE(write_profile(path, p).is_ok());
  EXPECT_EQ(read_profile(path, nullptr)->host, "node-18");
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/a/b")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
}

TEST(Profile, EmptySpreadReadsBackAsZeros) {
  TempDir dir;
  Profile p;
  p.curves["c"] = sample({1, 2}, [](double x) { return x; });
  p.curves["c"].spread.clear();
  ASSERT_TRUE(write_profile(dir.path() + "/p", p).is_ok());
  auto r = read_profile(dir.path() + "/p", nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->curves.at("c").spread, (std::vector<double>{0, 0}));
}

TEST(Profile, MalformedProfilesAreNotWritten) {
  TempDir dir;
  std::string path = dir.path() + "/p";
  auto rejects = [&](const Profile& p) {
    Status s = write_profile(path, p);
    EXPECT_EQ(s.code(), Err::kInvalidArg) << s.message();
    EXPECT_FALSE(std::filesystem::exists(path));
  };
  Profile p;
  p.curves["a b"] = sample({1}, [](double) { return 1.0; });
  rejects(p);
  p = Profile{};
  p.curves["c"] = sample({2, 1}, [](double) { return 1.0; });
  rejects(p);
  p = Profile{};
  p.curves["c"] = sample({1, 2}, [](double) { return -1.0; });
  rejects(p);
  p = Profile{};
  p.scalars["s"] = std::nan("");
  rejects(p);
  p = Profile{};
  p.surfaces["s"].block = {8};
  rejects(p);
}

TEST(Profile, MissingFileIsNotFound) {
  TempDir dir;
  Result<Profile> r = read_profile(dir.path() + "/nope.txt", nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Err::kNotFound);
  EXPECT_NE(r.status().message().find("nope.txt"), std::string::npos);
  EXPECT_NE(r.status().message().find("loom-measure"), std::string::npos);
  EXPECT_STREQ(err_name(Err::kNotFound), "not found");
}

class ProfileDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/p.txt";
    ASSERT_TRUE(write_profile(path_, full_profile()).is_ok());
    good_ = slurp(path_);
  }
  // Reads `data` back as a profile: must fail with `code`, naming the path and `word`.
  void expect_rejected(const std::string& data, Err code, const std::string& word) {
    spit(path_, data);
    Result<Profile> r = read_profile(path_, nullptr);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), code) << r.status().message();
    EXPECT_NE(r.status().message().find(path_), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(word), std::string::npos) << r.status().message();
  }
  TempDir dir_;
  std::string path_, good_;
};

TEST_F(ProfileDamage, WrongVersion) {
  std::string body = without_checksum(good_);
  body.replace(0, 14, "loom-profile 2");
  expect_rejected(resum(body), Err::kUnsupported, "version");
  expect_rejected(good_.substr(0, 13) + "7" + good_.substr(14), Err::kUnsupported, "version");
}

TEST_F(ProfileDamage, WrongMagic) {
  expect_rejected("lume" + good_.substr(4), Err::kUnsupported, "version");
  expect_rejected("", Err::kUnsupported, "corrupt");
  expect_rejected("hello\n", Err::kUnsupported, "not a Loom profile");
}

TEST_F(ProfileDamage, FlippedByte) {
  for (size_t at : {good_.size() / 3, good_.size() / 2, good_.size() - 30}) {
    std::string bad = good_;
    bad[at] ^= 0x01;
    expect_rejected(bad, Err::kInvalidArg, "corrupt");
  }
}

TEST_F(ProfileDamage, Truncated) {
  expect_rejected(good_.substr(0, good_.size() / 2), Err::kInvalidArg, "corrupt");
  expect_rejected(good_.substr(0, good_.size() - 1), Err::kInvalidArg, "corrupt");
  expect_rejected(good_.substr(0, good_.rfind("checksum ")), Err::kInvalidArg, "corrupt");
  expect_rejected(good_ + "scalar x 1\n", Err::kInvalidArg, "corrupt");
}

TEST_F(ProfileDamage, GarbageThatPassesTheChecksum) {
  std::string body = without_checksum(good_);
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string b = body;
    size_t at = b.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to);
    return resum(b);
  };
  const std::string w = "corrupt";
  expect_rejected(edit("scalar huge ", "scalar huge abc"), Err::kInvalidArg, w);
  expect_rejected(edit("scalar neg -0.125", "scalar neg -0.125x"), Err::kInvalidArg, w);
  expect_rejected(edit("scalar neg -0.125", "scalar neg nan"), Err::kInvalidArg, w);
  expect_rejected(edit("scalar neg -0.125", "scalar neg"), Err::kInvalidArg, w);
  expect_rejected(edit("curve d2h 27", "curve d2h 99999"), Err::kInvalidArg, w);
  expect_rejected(edit("curve d2h 27", "curve d2h 26"), Err::kInvalidArg, w);
  expect_rejected(edit("curve d2h 27\n  1 ", "curve d2h 27\n  0 "), Err::kInvalidArg, w);
  expect_rejected(edit("curve d2h 27\n  1 ", "curve d2h 27\n  3 "), Err::kInvalidArg, w);
  expect_rejected(edit("surface pack_dev 2", "surface pack_dev 3"), Err::kInvalidArg, w);
  expect_rejected(edit("gpu ", "gpu \\q"), Err::kInvalidArg, w);
  expect_rejected(edit("gpu ", "colour blue\ngpu "), Err::kInvalidArg, w);
  expect_rejected(edit("host ", "gpu x\nhost "), Err::kInvalidArg, w);
  expect_rejected(edit("scalar huge", "scalar neg"), Err::kInvalidArg, w);
  expect_rejected(edit("loggop mpi ", "loggop mpi 1 "), Err::kInvalidArg, w);
}

TEST(Profile, ForeignIdentityIsRejectedNamingBoth) {
  TempDir dir;
  std::string path = dir.path() + "/p.txt";
  Profile p = full_profile();
  ASSERT_TRUE(write_profile(path, p).is_ok());
  Identity here{"NVIDIA A100-SXM4-80GB", p.id.mpi};
  Result<Profile> r = read_profile(path, &here);
  ASSERT_FALSE(r.is_ok());
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("NVIDIA H200"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NVIDIA A100-SXM4-80GB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MPICH Version: 4.0.2 MPICH Release"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  Identity other_mpi{p.id.gpu, "Open MPI v4.1.4"};
  r = read_profile(path, &other_mpi);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("Open MPI v4.1.4"), std::string::npos);
  EXPECT_TRUE(read_profile(path, nullptr).is_ok());
}

// Saves and restores the variables the cache directory depends on.
class ProfileEnv : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"LOOM_CACHE_DIR", "LOOM_PROFILE", "XDG_CACHE_HOME",
                                          "HOME"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* s = getenv(v);
      saved_.emplace_back(s != nullptr, s ? s : "");
      unsetenv(v);
    }
    knobs_reload();
  }
  void TearDown() override {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i].first)
        setenv(kVars[i], saved_[i].second.c_str(), 1);
      else
        unsetenv(kVars[i]);
    }
    knobs_reload();
  }
  std::vector<std::pair<bool, std::string>> saved_;
};

TEST_F(ProfileEnv, CacheDirPrecedence) {
  EXPECT_EQ(cache_dir(), "");
  EXPECT_EQ(profile_path({"g", "m"}), "");
  setenv("HOME", "/home/u", 1);
  knobs_reload();
  EXPECT_EQ(cache_dir(), "/home/u/.cache/loom");
  setenv("XDG_CACHE_HOME", "relative/ignored", 1);
  EXPECT_EQ(cache_dir(), "/home/u/.cache/loom");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(cache_dir(), "/xdg/loom");
  setenv("LOOM_CACHE_DIR", "/cache", 1);
  knobs_reload();
  EXPECT_EQ(cache_dir(), "/cache");
}

TEST_F(ProfileEnv, ProfilePath) {
  setenv("LOOM_CACHE_DIR", "/cache", 1);
  knobs_reload();
  Identity id{"NVIDIA H200", "Open MPI v4.1.4"};
  char want[128];
  std::snprintf(want, sizeof want, "/cache/profile-v%d-%016" PRIx64 ".txt", Profile::kVersion,
                fnv1a64("NVIDIA H200\nOpen MPI v4.1.4"));
  EXPECT_EQ(profile_path(id), want);
  EXPECT_NE(profile_path({"NVIDIA A100", id.mpi}), want);
  setenv("LOOM_PROFILE", "/my/profile.txt", 1);
  knobs_reload();
  EXPECT_EQ(profile_path(id), "/my/profile.txt");
}

TEST(Profile, Fnv1a64KnownValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

// ---------------------------------------------------------------- ChoiceCache

TEST(Choice, HitsAndMisses) {
  Model m(synthetic());
  ChoiceCache c;
  Shape s = shape(65536);
  Prediction a = c.get(m, 42, 100, s);
  Prediction b = c.get(m, 42, 100, s);
  EXPECT_EQ(c.misses(), 1u);
  EXPECT_EQ(c.hits(), 1u);
  EXPECT_EQ(a.best, b.best);
  EXPECT_EQ(a.best, m.predict(s).best);
  for (int i = 0; i < kNumMethods; ++i) EXPECT_EQ(a.usec[i], b.usec[i]);
  // Each key part makes a new entry.
  c.get(m, 43, 100, s);
  c.get(m, 42, 101, s);
  c.get(m, 42, 100, shape(65536, false));
  c.get(m, 42, 100, shape(65536, true, false));
  EXPECT_EQ(c.misses(), 5u);
  EXPECT_EQ(c.size(), 5u);
  // Off node, the device method is not cached as usable from the on-node entry.
  EXPECT_EQ(us(c.get(m, 42, 100, shape(65536, false)), Method::kDevice), kInf);
  EXPECT_EQ(c.hits(), 2u);
  c.clear();
  EXPECT_EQ(c.size(), 0u);
}

TEST(Choice, ClearedAtCapacity) {
  Model m(synthetic());
  ChoiceCache c(4);
  for (int64_t i = 0; i < 4; ++i) c.get(m, 7, i, shape(1000));
  EXPECT_EQ(c.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) c.get(m, 7, i, shape(1000));
  EXPECT_EQ(c.hits(), 4u);
  c.get(m, 7, 4, shape(1000));  // the fifth: emptied, then stored
  EXPECT_EQ(c.size(), 1u);
  c.get(m, 7, 0, shape(1000));
  EXPECT_EQ(c.misses(), 6u);
  for (int64_t i = 0; i < 100; ++i) {
    c.get(m, static_cast<uint64_t>(i) * 977, i, shape(1000));
    EXPECT_LE(c.size(), 4u);
  }
}

TEST(Choice, ConcurrentGetsAgree) {
  Model m(synthetic());
  ChoiceCache c(64);  // small: clearing races with lookups too
  constexpr int kThreads = 8, kIters = 20000, kKeys = 100;
  auto shape_of = [](int k) { return shape(std::ldexp(1.0, k % 27), k % 3 != 0, k % 2 == 0); };
  std::vector<Prediction> want;
  for (int k = 0; k < kKeys; ++k) want.push_back(m.predict(shape_of(k)));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        int k = (i * 7 + t * 13) % kKeys;
        Prediction p = c.get(m, 1000 + static_cast<uint64_t>(k), k, shape_of(k));
        bool same = p.best == want[k].best;
        for (int j = 0; j < kNumMethods; ++j) same = same && p.usec[j] == want[k].usec[j];
        if (!same) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(c.hits() + c.misses(), static_cast<size_t>(kThreads) * kIters);
  EXPECT_LE(c.size(), 64u + kThreads);
}

}  // namespace
}  // namespace loom::model

// measured = over + scale * terms: the fit recovers both from small sizes
// and one large size, and clamps a wild scale.
TEST(Model, FitOverheadScaleRecoversBoth) {
  const std::vector<double> terms = {20, 22, 25, 30, 200};
  std::vector<double> measured;
  for (double t : terms) measured.push_back(-4 + 0.7 * t);
  double over = 0, k = 0;
  ASSERT_TRUE(loom::model::fit_overhead_scale(measured, terms, true, &over, &k));
  EXPECT_NEAR(k, 0.7, 0.02);
  EXPECT_NEAR(over, -4, 0.5);
  measured.back() = 1e6;  // a large size far off: the scale stops at 2
  ASSERT_TRUE(loom::model::fit_overhead_scale(measured, terms, true, &over, &k));
  EXPECT_EQ(k, 2.0);
  EXPECT_FALSE(loom::model::fit_overhead_scale({1, 2}, {1, std::numeric_limits<double>::infinity()},
                                               true, &over, &k));
  EXPECT_FALSE(loom::model::fit_overhead_scale({1}, {1}, true, &over, &k));
  // Without a scale: 1, and the overhead is the median over every point.
  ASSERT_TRUE(loom::model::fit_overhead_scale({11, 13, 40}, {10, 10, 10}, false, &over, &k));
  EXPECT_EQ(k, 1.0);
  EXPECT_EQ(over, 3.0);
}

// The node engine against the mirrors for a collective: where the measured
// curves last cross; 0 or +infinity where one engine wins everywhere; -1
// without the curves.
TEST(CollChoice, NodeEngineFromTheLastCrossing) {
  using loom::model::coll_node_from;
  using loom::model::coll_term;
  using loom::model::Curve;
  const auto curve = [](std::vector<double> usec) {
    Curve c;
    for (size_t i = 0; i < usec.size(); ++i) {
      c.bytes.push_back(std::ldexp(1.0, 10 + 2 * static_cast<int>(i)));  // 1 KiB, 4 KiB, ...
      c.usec.push_back(usec[i]);
      c.spread.push_back(0);
    }
    return c;
  };
  loom::model::Profile p;
  EXPECT_EQ(coll_node_from(p, "alltoall", 2), -1.0);
  EXPECT_EQ(coll_term("node", "alltoall", 2), "coll_node_alltoall_np2");
  EXPECT_EQ(loom::model::coll_call_name("MPI_Reduce_scatter_block"), "reduce_scatter_block");
  // Mirrors 10, 20, 40, 80 us; the node engine 30 us flat: it loses at 1 and
  // 4 KiB, wins from 16 KiB; the crossing lies between 4 and 16 KiB, where
  // the difference goes from +10 to -10 us: 8 KiB in log bytes.
  p.curves[coll_term("mirror", "alltoall", 2)] = curve({10, 20, 40, 80});
  p.curves[coll_term("node", "alltoall", 2)] = curve({30, 30, 30, 30});
  EXPECT_NEAR(coll_node_from(p, "alltoall", 2), 8192, 1e-6);
  EXPECT_EQ(coll_node_from(p, "alltoall", 4), -1.0);  // another number of ranks
  // A loss at a small size after a win still counts: the last crossing.
  p.curves[coll_term("node", "alltoall", 2)] = curve({5, 30, 30, 30});
  EXPECT_NEAR(coll_node_from(p, "alltoall", 2), 8192, 1e-6);
  p.curves[coll_term("node", "alltoall", 2)] = curve({5, 5, 5, 5});
  EXPECT_EQ(coll_node_from(p, "alltoall", 2), 0.0);
  p.curves[coll_term("node", "alltoall", 2)] = curve({5, 5, 5, 90});
  EXPECT_EQ(coll_node_from(p, "alltoall", 2), std::numeric_limits<double>::infinity());
}
