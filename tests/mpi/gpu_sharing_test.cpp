// Ranks sharing a GPU without MPS are told so once at MPI_Init: the warning
// is given exactly when a node has more ranks than GPUs and no MPS daemon,
// and MPS is recognised by its control pipe.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "transport/identity.hpp"

namespace loom::transport {
namespace {

TEST(GpuSharing, WarnsOnlyWhenRanksOutnumberGpusWithoutMps) {
  GpuSharing s;
  s.ranks_on_node = 2;
  s.gpus = 1;
  const std::string w = sharing_warning(s);
  EXPECT_NE(w.find("2 ranks share 1 GPU"), std::string::npos) << w;
  EXPECT_NE(w.find("MPS"), std::string::npos) << w;
  s.mps = true;
  EXPECT_EQ(sharing_warning(s), "");
  s.mps = false;
  s.gpus = 2;  // one GPU each
  EXPECT_EQ(sharing_warning(s), "");
  s.gpus = 0;  // no GPU: nothing to share
  s.ranks_on_node = 8;
  EXPECT_EQ(sharing_warning(s), "");
}

TEST(GpuSharing, MpsIsItsControlPipe) {
  char dir[] = "/tmp/loom_mps_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_EQ(setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1), 0);
  EXPECT_FALSE(mps_running());
  const std::string control = std::string(dir) + "/control";
  std::FILE* f = std::fopen(control.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_TRUE(mps_running());
  std::remove(control.c_str());
  rmdir(dir);
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
}

// This node as the job sees it: one rank (ctest runs the suite on one).
TEST(GpuSharing, CountsThisNodesRanks) {
  const GpuSharing s = gpu_sharing(true);  // host test mode: no GPU is counted
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(s.ranks_on_node, size);
  EXPECT_EQ(s.gpus, 0);
  EXPECT_TRUE(s.first_on_node);
  EXPECT_EQ(sharing_warning(s), "");
}

}  // namespace
}  // namespace loom::transport
