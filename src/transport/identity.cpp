#include "transport/identity.hpp"

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::transport {
namespace {

constexpr const char* kHostTestGpu = "host-test";

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(ws);
  return s.substr(a, b - a + 1);
}

std::string gpu_name(bool host_mode) {
  if (host_mode) return kHostTestGpu;
#ifdef LOOM_HAVE_CUDA
  int dev = 0, n = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaGetDevice(&dev) == cudaSuccess &&
      cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    return trim(prop.name);
  cudaGetLastError();  // clear a "no device" error for later callers
#endif
  return kHostTestGpu;
}

// Only the first line: Open MPI and MPICH add build details (dates, paths,
// configure options) below it that would split profiles of one library.
std::string mpi_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown MPI";
  std::string s(buf, static_cast<size_t>(len > 0 ? len : 0));
  s = s.substr(0, s.find_first_of("\r\n"));
  s = trim(s.c_str());  // the length may count a trailing NUL
  return s.empty() ? "unknown MPI" : s;
}

}  // namespace

model::Identity machine_identity(bool host_mode) {
  return {gpu_name(host_mode), mpi_version()};
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

bool mps_running() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string path = std::string(dir && *dir ? dir : "/tmp/nvidia-mps") + "/control";
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

GpuSharing gpu_sharing(bool host_mode) {
  GpuSharing s;
  // The UUIDs of the GPUs this process sees: ranks given one GPU each
  // (CUDA_VISIBLE_DEVICES per rank) see different ones, and the node's GPUs
  // are the distinct UUIDs of all its ranks.
  constexpr int kMaxGpus = 64;
  std::vector<std::array<char, 16>> mine;
#ifdef LOOM_HAVE_CUDA
  int n = 0;
  if (!host_mode && cudaGetDeviceCount(&n) == cudaSuccess) {
    for (int d = 0; d < n && d < kMaxGpus; ++d) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
      std::array<char, 16> u{};
      std::memcpy(u.data(), prop.uuid.bytes, u.size());
      mine.push_back(u);
    }
  }
  cudaGetLastError();  // clear a "no device" error for later callers
#else
  (void)host_mode;
#endif
  s.mps = mps_running();
  int me = 0, lowest = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm node;
  PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  PMPI_Comm_size(node, &s.ranks_on_node);
  PMPI_Allreduce(&me, &lowest, 1, MPI_INT, MPI_MIN, node);
  std::vector<std::array<char, 16>> all(static_cast<size_t>(kMaxGpus) * s.ranks_on_node);
  std::vector<std::array<char, 16>> padded(kMaxGpus);  // all-zero entries: no GPU
  std::copy(mine.begin(), mine.end(), padded.begin());
  PMPI_Allgather(padded.data(), kMaxGpus * 16, MPI_BYTE, all.data(), kMaxGpus * 16, MPI_BYTE, node);
  PMPI_Comm_free(&node);
  const std::array<char, 16> none{};
  std::set<std::array<char, 16>> distinct;
  for (const auto& u : all)
    if (u != none) distinct.insert(u);
  s.gpus = static_cast<int>(distinct.size());
  s.first_on_node = me == lowest;
  return s;
}

std::string sharing_warning(const GpuSharing& s) {
  if (!s.shared() || s.mps) return "";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%d ranks share %d GPU%s on this node without MPS: the GPU time-slices between "
                "their processes and every message costs about 150 us; start MPS "
                "(nvidia-cuda-mps-control -d) before mpirun",
                s.ranks_on_node, s.gpus, s.gpus == 1 ? "" : "s");
  return buf;
}

}  // namespace loom::transport
