// loom-halo on a GPU: cudaMalloc3D / cudaMalloc grids, pinned host staging,
// and the kernels of the hand-packed mode (what a careful user writes: all
// 26 neighbours' boxes of all quantities packed in one launch into one
// contiguous buffer, unpacked in one launch), plus the fill and the check.
#include <cuda_runtime.h>

#include <algorithm>

#include "halo_device.hpp"

namespace loom::halo {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(e));
}

constexpr int kThreads = 256;

// Blocks for n elements, grid-stride beyond that.
unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 4096));
}

__global__ void fill_kernel(double* grid, Geom g, Place p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < g.total();
       i += int64_t{gridDim.x} * blockDim.x)
    grid[i] = expected(g, p, i, false);
}

// Counts wrong elements; keeps the lowest wrong index.
__global__ void verify_kernel(const double* grid, Geom g, Place p, unsigned long long* wrong,
                              unsigned long long* first) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < g.total();
       i += int64_t{gridDim.x} * blockDim.x) {
    if (grid[i] == expected(g, p, i, true)) continue;
    atomicAdd(wrong, 1ull);
    atomicMin(first, static_cast<unsigned long long>(i));
  }
}

// blockIdx.y is the direction; x consecutive threads take consecutive x
// cells of a row, so reads and writes coalesce along rows. I: the index
// type, 32-bit where the buffer allows.
template <class I>
__global__ void pack_kernel(const double* grid, Geom g, Segments s, double* out) {
  const int k = blockIdx.y;
  const I n = static_cast<I>(s.offset[k + 1] - s.offset[k]);
  double* to = out + s.offset[k];
  for (I e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x)
    to[e] = grid[packed_offset(g, s.box[k], e)];
}

template <class I>
__global__ void unpack_kernel(const double* in, Geom g, Segments s, double* grid) {
  const int k = blockIdx.y;
  const I n = static_cast<I>(s.offset[k + 1] - s.offset[k]);
  const double* from = in + s.offset[k];
  for (I e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x)
    grid[packed_offset(g, s.box[k], e)] = from[e];
}

// 32-bit indices hold every segment (and the grid stride past its end).
bool small(const Segments& s) {
  return s.offset[kDirections] < (int64_t{1} << 31);
}

dim3 segment_grid(const Segments& s) {
  int64_t most = 0;
  for (int k = 0; k < kDirections; ++k) most = std::max(most, s.offset[k + 1] - s.offset[k]);
  return dim3(std::min(blocks_for(most), 1024u), kDirections);
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int device) : device_(device) {
    cudaDeviceProp prop;
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    name_ = prop.name;
    check(cudaMalloc(&scratch_, 2 * sizeof(unsigned long long)), "cudaMalloc");
  }
  ~CudaDevice() override { cudaFree(scratch_); }

  std::string name() const override { return name_; }
  int ordinal() const override { return device_; }

  double* alloc_grid(Geom& g, bool pitched) override {
    void* p = nullptr;
    if (pitched) {
      cudaPitchedPtr pp;
      const cudaExtent e =
          make_cudaExtent(static_cast<size_t>(g.ext(0)) * sizeof(double),
                          static_cast<size_t>(g.ext(1)), static_cast<size_t>(g.ext(2)) * g.q);
      check(cudaMalloc3D(&pp, e), "cudaMalloc3D");
      if (pp.pitch % sizeof(double) != 0) fail("cudaMalloc3D: pitch is not a multiple of 8");
      g.pitch = static_cast<int64_t>(pp.pitch / sizeof(double));
      p = pp.ptr;
    } else {
      g.pitch = g.ext(0);
      check(cudaMalloc(&p, static_cast<size_t>(g.total()) * sizeof(double)), "cudaMalloc");
    }
    return static_cast<double*>(p);
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
    return p;
  }
  void release(void* p) override { check(cudaFree(p), "cudaFree"); }
  void* alloc_host(size_t bytes) override {
    void* p = nullptr;
    check(cudaMallocHost(&p, std::max<size_t>(bytes, 1)), "cudaMallocHost");
    return p;
  }
  void release_host(void* p, size_t) override { check(cudaFreeHost(p), "cudaFreeHost"); }
  void to_host(void* host, const void* dev, size_t bytes) override {
    check(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  void to_device(void* dev, const void* host, size_t bytes) override {
    check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }

  void fill(double* grid, const Geom& g, const Place& p) override {
    fill_kernel<<<blocks_for(g.total()), kThreads>>>(grid, g, p);
    check(cudaDeviceSynchronize(), "fill kernel");
  }
  Verdict verify(const double* grid, const Geom& g, const Place& p) override {
    unsigned long long init[2] = {0, ~0ull}, out[2];
    check(cudaMemcpy(scratch_, init, sizeof init, cudaMemcpyHostToDevice), "cudaMemcpy");
    verify_kernel<<<blocks_for(g.total()), kThreads>>>(grid, g, p, scratch_, scratch_ + 1);
    check(cudaDeviceSynchronize(), "verify kernel");
    check(cudaMemcpy(out, scratch_, sizeof out, cudaMemcpyDeviceToHost), "cudaMemcpy");
    Verdict v;
    v.wrong = static_cast<int64_t>(out[0]);
    if (v.wrong > 0) {
      v.first = static_cast<int64_t>(out[1]);
      to_host(&v.got, grid + v.first, sizeof(double));
      v.want = expected(g, p, v.first, true);
    }
    return v;
  }
  void pack(const double* grid, const Geom& g, const Segments& s, double* out) override {
    if (small(s))
      pack_kernel<uint32_t><<<segment_grid(s), kThreads>>>(grid, g, s, out);
    else
      pack_kernel<int64_t><<<segment_grid(s), kThreads>>>(grid, g, s, out);
    check(cudaStreamSynchronize(0), "pack kernel");
  }
  void unpack(const double* in, const Geom& g, const Segments& s, double* grid) override {
    if (small(s))
      unpack_kernel<uint32_t><<<segment_grid(s), kThreads>>>(in, g, s, grid);
    else
      unpack_kernel<int64_t><<<segment_grid(s), kThreads>>>(in, g, s, grid);
    check(cudaStreamSynchronize(0), "unpack kernel");
  }

 private:
  int device_;
  std::string name_;
  unsigned long long* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int local_rank, std::string* why) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    *why = "no GPU found";
    return nullptr;
  }
  const int device = local_rank % n;
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    *why = std::string("cudaSetDevice: ") + cudaGetErrorString(e);
    return nullptr;
  }
  return std::make_unique<CudaDevice>(device);
}

void select_cuda_device(int local_rank) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) cudaSetDevice(local_rank % n);
  cudaGetLastError();
}

}  // namespace loom::halo
