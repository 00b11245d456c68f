// loom-halo without a GPU: Loom's test mode LOOM_TEST_HOST_AS_DEVICE=1 takes
// every buffer for device memory, so plain host memory runs Loom's device
// paths (moved by its host engine); the hand-packed mode's kernels become
// loops over the same index math. Host staging buffers (the naive mode) are
// marked as host memory, as the test mode allows, so they take the MPI's
// own path as they would on a GPU machine.
#include <cstdlib>
#include <cstring>

#include "halo_device.hpp"
#include "transport/memtype.hpp"

namespace loom::halo {
namespace {

// Rows padded to 512 bytes stand in for cudaMalloc3D's pitch.
constexpr int64_t kPitchBytes = 512;

void* checked_alloc(size_t bytes) {
  // 64-byte alignment, as the GPU allocators give at least that.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) fail("host allocation of " + std::to_string(bytes) + " bytes failed");
  return p;
}

class HostDevice final : public Device {
 public:
  std::string name() const override { return "host-as-device"; }
  int ordinal() const override { return 0; }

  double* alloc_grid(Geom& g, bool pitched) override {
    g.pitch = g.ext(0);
    if (pitched) g.pitch = (g.pitch * 8 + kPitchBytes - 1) / kPitchBytes * kPitchBytes / 8;
    return static_cast<double*>(checked_alloc(static_cast<size_t>(g.total()) * sizeof(double)));
  }
  void* alloc(size_t bytes) override { return checked_alloc(bytes); }
  void release(void* p) override { std::free(p); }
  void* alloc_host(size_t bytes) override {
    void* p = checked_alloc(bytes);
    transport::test_mark_host(p, bytes);
    return p;
  }
  void release_host(void* p, size_t) override {
    transport::test_mark_host(p, 0);
    std::free(p);
  }
  void to_host(void* host, const void* dev, size_t bytes) override {
    std::memcpy(host, dev, bytes);
  }
  void to_device(void* dev, const void* host, size_t bytes) override {
    std::memcpy(dev, host, bytes);
  }

  void fill(double* grid, const Geom& g, const Place& p) override {
    for (int64_t i = 0; i < g.total(); ++i) grid[i] = expected(g, p, i, false);
  }
  Verdict verify(const double* grid, const Geom& g, const Place& p) override {
    Verdict v;
    for (int64_t i = 0; i < g.total(); ++i) {
      const double want = expected(g, p, i, true);
      if (grid[i] == want) continue;
      if (v.wrong++ == 0) v = {1, i, grid[i], want};
    }
    return v;
  }
  void pack(const double* grid, const Geom& g, const Segments& s, double* out) override {
    for (int k = 0; k < kDirections; ++k)
      for (int64_t e = 0; e < s.offset[k + 1] - s.offset[k]; ++e)
        out[s.offset[k] + e] = grid[packed_offset(g, s.box[k], e)];
  }
  void unpack(const double* in, const Geom& g, const Segments& s, double* grid) override {
    for (int k = 0; k < kDirections; ++k)
      for (int64_t e = 0; e < s.offset[k + 1] - s.offset[k]; ++e)
        grid[packed_offset(g, s.box[k], e)] = in[s.offset[k] + e];
  }
};

}  // namespace

std::unique_ptr<Device> make_host_device() {
  return std::make_unique<HostDevice>();
}

}  // namespace loom::halo
