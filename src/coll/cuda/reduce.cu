// The GPU fold: one grid-stride kernel per (element type, operation) that
// reads up to kGpuReduceMaxInputs inputs, folds them left to right with the
// element operations host_reduce uses (coll/reduce_elem.hpp) and writes the
// output once. Built with -fmad=false (coll/cuda/sources.cmake): a
// contracted a*b-c would change complex PROD's bits.
//
// Three modes, chosen per launch from the pointers: 16-byte vectors when
// every pointer has out's alignment modulo 16 (leading and trailing elements
// one by one); element-aligned scalars; byte-wise loads for pointers that
// are not even aligned to their element.
#include <cstdint>
#include <cstring>

#include "coll/reduce_elem.hpp"
#include "coll/reduce_gpu.hpp"
#include "pack/cuda/check.hpp"

namespace loom::coll {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;
constexpr int kVecBytes = 16;
constexpr int kMaxIn = kGpuReduceMaxInputs;

enum Mode : int { kVector = 0, kAligned = 1, kBytes = 2 };

struct FoldArgs {
  const char* in[kMaxIn];
  char* out[kMaxIn];  // every output gets the same bits
  int n;
  int nout;
  int mode;
  uint64_t count;  // elements
  uint64_t head;   // kVector: elements before the first 16-byte boundary
  uint64_t nvec;   // kVector: 16-byte vectors after them
};

// Byte by byte: nvcc lowers a device memcpy of sizeof(T) bytes to one
// T-wide access even where the pointer is not aligned to T (seen on an
// H200: a misaligned-address fault, or a store one byte early).
template <size_t N>
__device__ __forceinline__ void copy_bytes(char* dst, const char* src) {
#pragma unroll
  for (size_t i = 0; i < N; ++i) dst[i] = src[i];
}

template <class T>
__device__ __forceinline__ T load_elem(const char* p, bool aligned) {
  T v;
  if (aligned)
    v = *reinterpret_cast<const T*>(p);
  else
    copy_bytes<sizeof(T)>(reinterpret_cast<char*>(&v), p);
  return v;
}

// Padded pairs are stored field by field: their padding is never written.
template <class T>
__device__ __forceinline__ void store_elem(char* p, const T& v, bool aligned) {
  if constexpr (elem::Padded<T>::value) {
    if (aligned) {
      T* q = reinterpret_cast<T*>(p);
      q->v = v.v;
      q->k = v.k;
    } else {
      copy_bytes<sizeof v.v>(p + offsetof(T, v), reinterpret_cast<const char*>(&v.v));
      copy_bytes<sizeof v.k>(p + offsetof(T, k), reinterpret_cast<const char*>(&v.k));
    }
  } else {
    if (aligned)
      *reinterpret_cast<T*>(p) = v;
    else
      copy_bytes<sizeof(T)>(p, reinterpret_cast<const char*>(&v));
  }
}

template <class T, class Op>
__device__ __forceinline__ void fold_one(const FoldArgs& a, uint64_t i, bool aligned) {
  const uint64_t off = i * sizeof(T);
  T acc = load_elem<T>(a.in[0] + off, aligned);
#pragma unroll
  for (int k = 1; k < kMaxIn; ++k)
    if (k < a.n) acc = Op{}(acc, load_elem<T>(a.in[k] + off, aligned));
  for (int o = 0; o < a.nout; ++o) store_elem(a.out[o] + off, acc, aligned);
}

// Loads go out kLoadBatch inputs at a time, all in flight before the
// arithmetic: enough bytes in flight per thread for the common 2..8 inputs
// without the registers of 16 (which would halve the occupancy).
constexpr int kLoadBatch = 8;

template <class T, class Op>
__device__ __forceinline__ void fold_vec(const FoldArgs& a, uint64_t v) {
  constexpr int kV = kVecBytes / sizeof(T);
  const uint64_t off = a.head * sizeof(T) + v * kVecBytes;
  T acc[kV];
#pragma unroll
  for (int base = 0; base < kMaxIn; base += kLoadBatch) {
    if (base >= a.n) break;
    uint4 raw[kLoadBatch];
#pragma unroll
    for (int j = 0; j < kLoadBatch; ++j)
      if (base + j < a.n) raw[j] = *reinterpret_cast<const uint4*>(a.in[base + j] + off);
#pragma unroll
    for (int j = 0; j < kLoadBatch; ++j) {
      if (base + j >= a.n) break;
      T x[kV];
      memcpy(x, &raw[j], kVecBytes);
      if (base + j == 0) {
        memcpy(acc, x, kVecBytes);
      } else {
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[e] = Op{}(acc[e], x[e]);
      }
    }
  }
  for (int o = 0; o < a.nout; ++o) {
    if constexpr (elem::Padded<T>::value) {
#pragma unroll
      for (int j = 0; j < kV; ++j) store_elem(a.out[o] + off + j * sizeof(T), acc[j], true);
    } else {
      uint4 w;
      memcpy(&w, acc, kVecBytes);
      *reinterpret_cast<uint4*>(a.out[o] + off) = w;
    }
  }
}

template <class T, class Op>
__global__ void __launch_bounds__(kThreads) fold_kernel(const __grid_constant__ FoldArgs a) {
  const uint64_t tid = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t threads = uint64_t{gridDim.x} * blockDim.x;
  if (a.mode == kVector) {
    for (uint64_t v = tid; v < a.nvec; v += threads) fold_vec<T, Op>(a, v);
    const uint64_t body = a.nvec * (kVecBytes / sizeof(T));
    const uint64_t rest = a.count - body;  // the head and the tail
    for (uint64_t r = tid; r < rest; r += threads)
      fold_one<T, Op>(a, r < a.head ? r : r + body, true);
  } else {
    const bool aligned = a.mode == kAligned;
    for (uint64_t i = tid; i < a.count; i += threads) fold_one<T, Op>(a, i, aligned);
  }
}

// One launch over in[0..n-1] (n <= kMaxIn) into out[0..nout-1] (nout <= kMaxIn).
template <class T, class Op>
Status launch_fold(const void* const* in, int n, void* const* outs, int nout, uint64_t count,
                   int sms, cudaStream_t stream) {
  FoldArgs a{};
  void* out = outs[0];
  uintptr_t any = 0, diff = 0;
  for (int k = 0; k < n; ++k) {
    a.in[k] = static_cast<const char*>(in[k]);
    any |= reinterpret_cast<uintptr_t>(in[k]);
    diff |= reinterpret_cast<uintptr_t>(in[k]) ^ reinterpret_cast<uintptr_t>(out);
  }
  for (int o = 0; o < nout; ++o) {
    a.out[o] = static_cast<char*>(outs[o]);
    any |= reinterpret_cast<uintptr_t>(outs[o]);
    diff |= reinterpret_cast<uintptr_t>(outs[o]) ^ reinterpret_cast<uintptr_t>(out);
  }
  a.n = n;
  a.nout = nout;
  a.count = count;
  const uintptr_t mis = reinterpret_cast<uintptr_t>(out) % kVecBytes;
  const uintptr_t head_bytes = (kVecBytes - mis) % kVecBytes;
  uint64_t work = count;
  if ((diff % kVecBytes) == 0 && (any % alignof(T)) == 0 && head_bytes % sizeof(T) == 0 &&
      kVecBytes % sizeof(T) == 0) {
    a.mode = kVector;
    a.head = head_bytes / sizeof(T) < count ? head_bytes / sizeof(T) : count;
    a.nvec = (count - a.head) * sizeof(T) / kVecBytes;
    const uint64_t rest = count - a.nvec * (kVecBytes / sizeof(T));
    work = a.nvec > rest ? a.nvec : rest;
  } else {
    a.mode = (any % alignof(T)) == 0 ? kAligned : kBytes;
  }
  uint64_t grid = (work + kThreads - 1) / kThreads;
  const uint64_t cap = uint64_t(sms) * kBlocksPerSm;
  if (grid > cap) grid = cap;
  if (grid == 0) grid = 1;
  fold_kernel<T, Op><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
  LOOM_CUDA_TRY(cudaGetLastError());
  return Status::ok();
}

// The whole fold, in passes of kMaxIn inputs (the first pass's inputs
// included, the later ones fold the output so far with kMaxIn - 1 more);
// the last pass writes every output.
template <class T, class Op>
Status fold_all(const void* const* in, int n, void* const* outs, int nout, uint64_t count,
                cudaStream_t stream) {
  int dev = 0, sms = 0;
  LOOM_CUDA_TRY(cudaGetDevice(&dev));
  LOOM_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (n <= kMaxIn) return launch_fold<T, Op>(in, n, outs, nout, count, sms, stream);

  // An output that is also a later pass's input: fold into a temporary until
  // the last pass.
  bool late_alias = false;
  for (int k = kMaxIn; k < n; ++k)
    for (int o = 0; o < nout; ++o) late_alias |= in[k] == outs[o];
  void* out = outs[0];
  void* acc = out;
  if (late_alias) LOOM_CUDA_TRY(cudaMallocAsync(&acc, count * sizeof(T), stream));
  auto passes = [&]() -> Status {
    LOOM_TRY((launch_fold<T, Op>(in, kMaxIn, &acc, 1, count, sms, stream)));
    const void* batch[kMaxIn];
    for (int next = kMaxIn; next < n; next += kMaxIn - 1) {
      const int take = n - next < kMaxIn - 1 ? n - next : kMaxIn - 1;
      batch[0] = acc;
      for (int k = 0; k < take; ++k) batch[1 + k] = in[next + k];
      const bool last = next + take == n;
      LOOM_TRY((launch_fold<T, Op>(batch, take + 1, last ? outs : &acc, last ? nout : 1, count, sms,
                                   stream)));
    }
    return Status::ok();
  };
  const Status s = passes();
  if (acc != out) {
    const cudaError_t e = cudaFreeAsync(acc, stream);
    if (s.is_ok() && e != cudaSuccess)
      return pack::gpu::cuda_status(e, "cudaFreeAsync", __FILE__, __LINE__);
  }
  return s;
}

}  // namespace

Status gpu_reduce_to(ReduceOp op, Basic b, const void* const* in, int n, void* const* outs,
                     int nout, size_t count, cudaStream_t stream) {
  if (!reduce_defined(op, b))
    return Status(Err::kUnsupported, std::string("MPI_") + reduce_op_name(op) +
                                         " is not defined for " + basic_name(b));
  if (n < 1 || in == nullptr) return Status(Err::kInvalidArg, "gpu_reduce: no inputs");
  if (nout < 1 || nout > kMaxIn || outs == nullptr)
    return Status(Err::kInvalidArg, "gpu_reduce: 1 to 16 outputs");
  if (count == 0) return Status::ok();
  for (int o = 0; o < nout; ++o)
    if (outs[o] == nullptr) return Status(Err::kInvalidArg, "gpu_reduce: null output");
  for (int k = 0; k < n; ++k)
    if (in[k] == nullptr) return Status(Err::kInvalidArg, "gpu_reduce: null input");

  if (op == ReduceOp::kReplace || op == ReduceOp::kNoOp) {  // a copy of one input
    const void* from = in[op == ReduceOp::kReplace ? n - 1 : 0];
    bool padded = false;
    Status s = elem::dispatch_padded(b, Status::ok(), [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      padded = true;
      return fold_all<T, elem::Copy>(&from, 1, outs, nout, count, stream);
    });
    if (padded) return s;
    for (int o = 0; o < nout; ++o)
      if (outs[o] != from)
        LOOM_CUDA_TRY(
            cudaMemcpyAsync(outs[o], from, count * basic_size(b), cudaMemcpyDefault, stream));
    return Status::ok();
  }
  return elem::dispatch(op, b, Status(Err::kInternal, "gpu_reduce: no fold for a defined pair"),
                        [&](auto tag, auto opv, size_t per) -> Status {
                          using T = typename decltype(tag)::type;
                          return fold_all<T, decltype(opv)>(in, n, outs, nout, count * per, stream);
                        });
}

Status gpu_reduce(ReduceOp op, Basic b, const void* const* in, int n, void* out, size_t count,
                  cudaStream_t stream) {
  return gpu_reduce_to(op, b, in, n, &out, 1, count, stream);
}

Status gpu_reduce_sync(ReduceOp op, Basic b, const void* const* in, int n, void* out, size_t count,
                       cudaStream_t stream) {
  LOOM_TRY(gpu_reduce(op, b, in, n, out, count, stream));
  LOOM_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::ok();
}

}  // namespace loom::coll
