// loom-halo's memory and kernels: a GPU (halo_cuda.cu) or, in Loom's test
// mode LOOM_TEST_HOST_AS_DEVICE=1, host memory that Loom takes for device
// memory and loops that stand in for the kernels (halo_host.cpp). Both run
// the index math of halo_grid.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "halo_grid.hpp"

namespace loom::halo {

// The first wrong element a verification met, and how many there were.
struct Verdict {
  int64_t wrong = 0;
  int64_t first = -1;  // element index, or -1
  double got = 0, want = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  // The GPU's name, or "host-as-device".
  virtual std::string name() const = 0;
  // Which GPU of the node this rank uses (0 in host-as-device mode).
  virtual int ordinal() const = 0;

  // The grid of g (all quantities). pitched: rows padded as cudaMalloc3D
  // pads them; else rows of exactly n[0] + 2r. Sets g.pitch.
  virtual double* alloc_grid(Geom& g, bool pitched) = 0;
  virtual void* alloc(size_t bytes) = 0;  // device memory
  virtual void release(void* p) = 0;
  // Host memory the MPI reads directly (pinned on a GPU).
  virtual void* alloc_host(size_t bytes) = 0;
  virtual void release_host(void* p, size_t bytes) = 0;
  // Synchronous copies.
  virtual void to_host(void* host, const void* dev, size_t bytes) = 0;
  virtual void to_device(void* dev, const void* host, size_t bytes) = 0;

  // Every element as expected(g, p, i, false): interior values, stale halo,
  // padding.
  virtual void fill(double* grid, const Geom& g, const Place& p) = 0;
  // Every element against expected(g, p, i, true).
  virtual Verdict verify(const double* grid, const Geom& g, const Place& p) = 0;
  // All boxes of s into the contiguous buffer `out` (one launch), and back;
  // both return when the data is in place.
  virtual void pack(const double* grid, const Geom& g, const Segments& s, double* out) = 0;
  virtual void unpack(const double* in, const Geom& g, const Segments& s, double* grid) = 0;
};

// Prints what failed and ends the whole job (MPI_Abort): a tool's way out of
// a failed CUDA call or allocation.
[[noreturn]] void fail(const std::string& what);

// Host memory standing in for device memory (Loom's host-as-device mode).
std::unique_ptr<Device> make_host_device();
// The GPU local_rank % (number of GPUs), or null with the reason in *why.
// Defined only in CUDA builds (LOOM_HAVE_CUDA).
std::unique_ptr<Device> make_cuda_device(int local_rank, std::string* why);
// Only makes GPU local_rank % (number of GPUs) current, if there is one.
void select_cuda_device(int local_rank);

}  // namespace loom::halo
