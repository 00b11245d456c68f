// The model inside the library: the profile is read at MPI_Init and `auto`
// follows it; a corrupt, foreign or missing profile leaves the built-in rule.
// One process per case (the profile is read once):
//   loom_model_runtime_tests good|corrupt|foreign|none
// A synthetic profile with known answers is written before MPI_Init and
// named by LOOM_PROFILE; the test mode (host engine) needs no GPU.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "model/profile.hpp"
#include "mpi/runtime.hpp"
#include "transport/identity.hpp"

namespace loom::test {
namespace {

std::string g_case;

model::Curve linear(double a, double b) {
  model::Curve c;
  for (double n = 1; n <= double(1 << 28); n *= 2) {
    c.bytes.push_back(n);
    c.usec.push_back(a + b * n);
    c.spread.push_back(0);
  }
  return c;
}

model::Surface flat(double a, double b) {
  model::Surface s;
  s.block = {1, 65536};
  s.by_block = {linear(a, b), linear(a, b)};
  return s;
}

// one-shot: 1 + 2n/1000 + mpi; staged: 20 + 4n/1e5 + mpi: they cross near
// 9.7 KB, so 1 KiB goes one-shot and 1 MiB staged (the built-in rule would
// send both one-shot).
model::Profile synthetic(const model::Identity& id) {
  model::Profile p;
  p.id = id;
  p.host = "test";
  p.date = "2026-11-23T00:00:00Z";
  p.loom_version = "test";
  p.surfaces["pack_host"] = flat(0.5, 1e-3);
  p.surfaces["unpack_host"] = flat(0.5, 1e-3);
  p.surfaces["pack_dev"] = flat(5, 1e-5);
  p.surfaces["unpack_dev"] = flat(5, 1e-5);
  p.curves["d2h"] = linear(5, 1e-5);
  p.curves["h2d"] = linear(5, 1e-5);
  p.curves["mpi_on_node"] = linear(1, 1e-4);
  p.curves["ipc_copy"] = linear(3, 1e-5);
  p.scalars["overhead_device"] = 0;
  p.scalars["overhead_oneshot"] = 0;
  p.scalars["overhead_staged"] = 0;
  // Alltoall on 2 ranks: the mirrors 10-80 us, the node engine 30 us flat,
  // crossing at 8 KiB a rank (model_test's CollChoice).
  model::Curve mirror, node;
  for (int i = 0; i < 4; ++i) {
    const double bytes = double(1024) * (1 << (2 * i));
    mirror.bytes.push_back(bytes);
    mirror.usec.push_back(10.0 * (1 << i));
    mirror.spread.push_back(0);
    node.bytes.push_back(bytes);
    node.usec.push_back(30);
    node.spread.push_back(0);
  }
  p.curves["coll_mirror_alltoall_np2"] = mirror;
  p.curves["coll_node_alltoall_np2"] = node;
  return p;
}

std::string explain(MPI_Datatype t, int count) {
  char buf[1024];
  EXPECT_EQ(loom_explain(t, count, 1, buf, sizeof buf), MPI_SUCCESS);
  return buf;
}

TEST(ModelRuntime, AutoFollowsTheProfileOrTheBuiltInRule) {
  ASSERT_NE(runtime(), nullptr);
  const bool good = g_case == "good";
  EXPECT_EQ(runtime()->model() != nullptr, good);
  MPI_Datatype vec0, vec;
  MPI_Type_vector(256, 2, 4, MPI_INT, &vec0);  // 2 KiB of 8-byte blocks, 4 KiB apart
  MPI_Type_create_resized(vec0, 0, 4096, &vec);
  MPI_Type_free(&vec0);
  MPI_Type_commit(&vec);
  const std::string small = explain(MPI_BYTE, 1024), large = explain(vec, 512);
  EXPECT_NE(small.find("method oneshot"), std::string::npos) << small;
  if (good) {
    EXPECT_NE(small.find("predicted oneshot"), std::string::npos) << small;
    EXPECT_NE(large.find("predicted staged"), std::string::npos) << large;
    EXPECT_NE(large.find("method staged"), std::string::npos) << large;
    EXPECT_NE(large.find("device n/a"), std::string::npos) << large;  // no device method here
  } else {
    EXPECT_NE(large.find("no profile"), std::string::npos) << large;
    EXPECT_NE(large.find("method oneshot"), std::string::npos) << large;  // 1 MiB: one-shot
  }
  // Repeats come from the choice cache.
  if (good) {
    const size_t hits = runtime()->choices().hits();
    explain(vec, 512);
    EXPECT_EQ(runtime()->choices().hits(), hits + 2);  // the prediction, then the choice
  }
  // The choice does not change what arrives: a message to self, both sizes.
  for (int count : {1, 512}) {
    std::vector<int> src(static_cast<size_t>(count) * 1024), dst(src.size(), -1);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int>(i * 7);
    MPI_Sendrecv(src.data(), count, vec, 0, 1, dst.data(), count, vec, 0, 1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(dst[i], (i % 4) < 2 ? src[i] : -1) << i;
  }
  MPI_Type_free(&vec);
  // The node engine's size rule for blocking collectives: the profile's
  // crossing where it has the call's times on that many ranks.
  const int64_t built_in = runtime()->coll_node_min;
  EXPECT_EQ(runtime()->coll_node_min_for("MPI_Alltoall", 2), good ? 8192 : built_in);
  EXPECT_EQ(runtime()->coll_node_min_for("MPI_Alltoall", 4), built_in);
  EXPECT_EQ(runtime()->coll_node_min_for("MPI_Alltoallv", 2), built_in);
  // A forced method wins over the model.
  ASSERT_EQ(loom_set_method("staged"), MPI_SUCCESS);
  EXPECT_NE(explain(MPI_BYTE, 1024).find("method staged"), std::string::npos);
  ASSERT_EQ(loom_set_method("auto"), MPI_SUCCESS);
}

}  // namespace
}  // namespace loom::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace loom;
  test::g_case = argc > 1 ? argv[1] : "good";
  char dir[] = "/tmp/loom-model-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  const std::string path = std::string(dir) + "/profile.txt";
  setenv("LOOM_PROFILE", path.c_str(), 1);
  model::Identity id = transport::machine_identity(true);  // MPI_Get_library_version: pre-Init ok
  if (test::g_case == "foreign") id.gpu = "Some Other GPU";
  if (test::g_case != "none") {
    if (!model::write_profile(path, test::synthetic(id)).is_ok()) return 2;
  }
  if (test::g_case == "corrupt") {  // one digit changed: the checksum no longer holds
    std::fstream f(path, std::ios::in | std::ios::out);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t at = text.size() / 2;
    while (at < text.size() && (text[at] < '1' || text[at] > '8')) ++at;
    if (at == text.size()) return 2;
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(text[at] + 1));
  }
  MPI_Init(&argc, &argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  std::remove(path.c_str());
  rmdir(dir);
  return rc;
}
