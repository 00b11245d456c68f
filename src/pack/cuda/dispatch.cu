// Kernels and their launches. The kernels are thin grid-stride loops around
// the agents (agent.hpp); which one runs, with which word and grid, was
// decided by plan() (policy.cpp). Six instances in all: words x {1,2,4,8,16},
// segments x 1; the direction (pack or unpack) is a uniform runtime flag.
// Two batch kernels run many launches' worth in one (their bodies are the
// same), and a signal kernel writes ready words after them.
// The arguments are __grid_constant__: agents take them by reference and
// index them from the parameter bank, never from a local copy.
#include <algorithm>
#include <vector>

#include "pack/cuda/check.hpp"
#include "pack/cuda/dispatch.hpp"

namespace loom::pack::gpu {
namespace {

// One word per item; each thread keeps words_items(W) loads in flight, and
// consecutive threads take consecutive packed words, so the packed side is
// fully coalesced and the user side as coalesced as the layout allows.
// `block` of `nblocks` is this CTA's place in the job's own grid.
template <int W, class Args>
__device__ __forceinline__ void words_body(const Args& a, int64_t block, int64_t nblocks) {
  using T = typename WordOf<W>::T;
  constexpr int kItems = words_items(W);
  const int64_t n = nwords_of(a);
  const int64_t step = nblocks * blockDim.x;
  for (int64_t g0 = block * blockDim.x + threadIdx.x; g0 < n; g0 += kItems * step) {
    T v[kItems];
    char* dst[kItems];
    LOOM_UNROLL
    for (int k = 0; k < kItems; ++k) {
      const int64_t g = g0 + k * step;
      if (g < n) {
        const char* src;
        ends_of<W>(a, g, &src, &dst[k]);
        v[k] = load_as<T>(src);
      }
    }
    LOOM_UNROLL
    for (int k = 0; k < kItems; ++k)
      if (g0 + k * step < n) store_as<T>(dst[k], v[k]);
  }
}

// words_body at the job's word width.
template <class Args>
__device__ __forceinline__ void words_at(const Args& a, int word, int64_t block, int64_t nblocks) {
  switch (word) {
    case 1:
      return words_body<1>(a, block, nblocks);
    case 2:
      return words_body<2>(a, block, nblocks);
    case 4:
      return words_body<4>(a, block, nblocks);
    case 8:
      return words_body<8>(a, block, nblocks);
    default:
      return words_body<16>(a, block, nblocks);
  }
}

template <int W, class Args>
__global__ void __launch_bounds__(kThreads) words_kernel(const __grid_constant__ Args a) {
  words_body<W>(a, blockIdx.x, gridDim.x);
}

// The piece classes in turn: long and short pieces by groups of their
// class's width (a warp, 16 or 8 lanes), then the tiny pieces' bytes, one per
// thread and kTinyItems per trip (loads first), consecutive threads on
// consecutive bytes.
__device__ __forceinline__ void segments_body(const SegArgs& a, int64_t block, int64_t nblocks) {
  const int64_t tid = block * blockDim.x + threadIdx.x;
  const int64_t threads = nblocks * blockDim.x;
#pragma unroll 1
  for (int c = 0; c < kTinyClass; ++c) {
    const SegClass& k = a.geom.cls[c];
    const int lane = static_cast<int>(threadIdx.x) & (k.lanes - 1);
    const int64_t groups = threads >> k.lanes_log2;
    for (int64_t i = tid >> k.lanes_log2; i < k.nitems; i += groups) seg_move(a, k, i, lane);
  }
  const int64_t n = a.geom.cls[kTinyClass].nitems;
  for (int64_t i0 = tid; i0 < n; i0 += kTinyItems * threads) {
    unsigned char v[kTinyItems];
    char* dst[kTinyItems];
    LOOM_UNROLL
    for (int k = 0; k < kTinyItems; ++k)
      if (i0 + k * threads < n) {
        const char* src;
        tiny_ends(a, i0 + k * threads, &src, &dst[k]);
        v[k] = load_as<unsigned char>(src);
      }
    LOOM_UNROLL
    for (int k = 0; k < kTinyItems; ++k)
      if (i0 + k * threads < n) *dst[k] = static_cast<char>(v[k]);
  }
}

__global__ void __launch_bounds__(kThreads, 4) segments_kernel(const __grid_constant__ SegArgs a) {
  segments_body(a, blockIdx.x, gridDim.x);
}

// Many launches in one: job blockIdx.y runs on the first `grid` CTAs of its
// row (the others return at once), as its own kernel would have.
// The job's arguments share their bytes: a launch's parameters are copied
// whole at every launch (about 3 us more for 32 KB than for 4 KB on an
// H200), so a job costs its largest kind, not the three kinds together.
union BatchArgsOf {
  WordArgs words;
  SegArgs segs;
  XferArgs xfer;
  BatchArgsOf() {}
};
struct BatchJob {
  KernelKind kind = KernelKind::kNone;
  int word = 0;
  int64_t grid = 0;
  BatchArgsOf a;
};
template <int N>
struct BatchArgs {
  BatchJob job[N];
};

// Words a batch launch writes once all its jobs are done (TailArgs::n 0:
// none), so the stream needs no signal kernel of its own after it.
struct TailArgs {
  uint32_t* word[kSignalMax];
  uint32_t value[kSignalMax];
  int n = 0;
  unsigned* counters = nullptr;  // kTailCounters, zero between launches of the stream
};
// Kernel parameters may take 32764 bytes (CUDA 12.1 and later, Volta and later).
static_assert(sizeof(BatchArgs<kBatchMax>) + sizeof(TailArgs) <= 32764,
              "batch kernel parameters too large");

// The last CTA of a launch to finish (counters[1 + row] counts a job's
// CTAs, counters[0] the jobs done; each goes back to zero for the next
// launch) writes the tail's words. Every CTA fences system-wide before it
// counts: packed bytes may go to mapped host memory, which the words'
// reader (a host thread) must see before a word.
__device__ __forceinline__ void write_tail(const TailArgs& t, int64_t grid) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    last = false;
    unsigned* row = &t.counters[1 + blockIdx.y];
    if (atomicAdd(row, 1u) == static_cast<unsigned>(grid - 1)) {
      *row = 0;
      __threadfence();
      if (atomicAdd(&t.counters[0], 1u) == gridDim.y - 1) {
        t.counters[0] = 0;
        last = true;
      }
    }
  }
  __syncthreads();
  if (!last) return;
  __threadfence_system();
  for (int i = static_cast<int>(threadIdx.x); i < t.n; i += static_cast<int>(blockDim.x))
    *reinterpret_cast<volatile uint32_t*>(t.word[i]) = t.value[i];
}

template <int N>
__global__ void __launch_bounds__(kThreads)
    batch_kernel(const __grid_constant__ BatchArgs<N> b, const __grid_constant__ TailArgs t) {
  const BatchJob& j = b.job[blockIdx.y];
  if (blockIdx.x >= j.grid) return;
  if (j.kind == KernelKind::kSegments)
    segments_body(j.a.segs, blockIdx.x, j.grid);
  else if (j.kind == KernelKind::kTransfer)
    words_at(j.a.xfer, j.word, blockIdx.x, j.grid);
  else
    words_at(j.a.words, j.word, blockIdx.x, j.grid);
  if (t.n > 0) write_tail(t, j.grid);
}

template <int N>
Status launch_batch(const Launch* const* ls, int n, cudaStream_t s, const TailArgs& tail) {
  BatchArgs<N> b;
  int64_t grid = 1;
  for (int i = 0; i < n; ++i) {
    b.job[i].kind = ls[i]->kind;
    b.job[i].word = ls[i]->word;
    b.job[i].grid = ls[i]->grid;
    if (ls[i]->kind == KernelKind::kSegments)
      b.job[i].a.segs = ls[i]->segs;
    else if (ls[i]->kind == KernelKind::kTransfer)
      b.job[i].a.xfer = ls[i]->xfer;
    else
      b.job[i].a.words = ls[i]->words;
    grid = grid > ls[i]->grid ? grid : ls[i]->grid;
  }
  batch_kernel<N>
      <<<dim3(static_cast<unsigned>(grid), static_cast<unsigned>(n)), kThreads, 0, s>>>(b, tail);
  LOOM_CUDA_TRY(cudaGetLastError());
  return Status::ok();
}

struct SignalArgs {
  uint32_t* word[kSignalMax];
  uint32_t value[kSignalMax];
  int n = 0;
};

// After the work before it on the stream: a system-wide fence, then each
// word, so a peer that sees a word sees the bytes it announces.
__global__ void signal_kernel(const __grid_constant__ SignalArgs a) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= a.n) return;
  __threadfence_system();
  *reinterpret_cast<volatile uint32_t*>(a.word[i]) = a.value[i];
}

struct WaitArgs {
  const uint32_t* word[kSignalMax];
  uint32_t value[kSignalMax];
  int n = 0;
};

// Polls over PCIe or NVLink at most every ~100 ns a word: words usually sit
// in host memory that other processes write.
__global__ void wait_kernel(const __grid_constant__ WaitArgs a) {
  const int i = static_cast<int>(threadIdx.x);
  if (i >= a.n) return;
  for (;;) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(a.word[i]) : "memory");
    if (static_cast<int32_t>(v - a.value[i]) >= 0) break;
    __nanosleep(100);
  }
}

// n bytes from src to dst by every thread of the grid (16- or 8-byte words
// where both are aligned so).
__device__ void copy_bytes(const unsigned char* src, unsigned char* dst, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uintptr_t both = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  uint64_t done = 0;
  if (both % 16 == 0) {
    const uint64_t words = n / 16;
    for (uint64_t i = tid; i < words; i += stride)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    done = words * 16;
  } else if (both % 8 == 0) {
    const uint64_t words = n / 8;
    for (uint64_t i = tid; i < words; i += stride)
      reinterpret_cast<uint64_t*>(dst)[i] = reinterpret_cast<const uint64_t*>(src)[i];
    done = words * 8;
  }
  for (uint64_t i = done + tid; i < n; i += stride) dst[i] = src[i];
}

// A copy whose source and length are published in mapped memory after the
// launch was enqueued (a stream-triggered receive learns where its bytes
// are only once they have landed): from[0] the source address, from[1] the
// bytes, read when the kernel runs, from device memory (a copy made just
// before on the stream: reads of one host word by every block queue up
// behind each other, about a microsecond each). Null `from`: nothing.
__global__ void __launch_bounds__(kThreads)
    copy_from_kernel(const uint64_t* from, unsigned char* dst) {
  if (!from) return;
  __shared__ uint64_t at[2];
  if (threadIdx.x < 2)
    at[threadIdx.x] = reinterpret_cast<const volatile uint64_t*>(from)[threadIdx.x];
  __syncthreads();
  copy_bytes(reinterpret_cast<const unsigned char*>(static_cast<uintptr_t>(at[0])), dst, at[1]);
}

// A wait on a word whose address is published in mapped memory after the
// launch was enqueued: from[0] the word (0: none), from[1] the value it
// must reach (mod 2^32). One thread: a copy kernel that polled in every
// block made the sender's pack, in another process, many times slower.
__device__ void poll_word(uint64_t word, uint32_t value) {
  for (;;) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(word) : "memory");
    if (static_cast<int32_t>(v - value) >= 0) break;
    __nanosleep(100);
  }
}

__global__ void wait_published_kernel(const uint64_t* from) {
  const volatile uint64_t* f = from;
  if (const uint64_t word = f[0]) poll_word(word, static_cast<uint32_t>(f[1]));
}

// A small pulled receive in one launch (at most kPullSmallBlocks blocks, so
// that few poll): each block's first thread waits for `release` (a word the
// host thread writes once the bytes' address is published; null: none),
// reads landed[0..3] (source, bytes, and a word the sender's stream writes
// once packed, with its value; 0: none) from mapped memory, waits for that
// word, then the block copies. Three stream operations fewer than the
// waits, the published words' copy and copy_from_kernel one after another.
__global__ void __launch_bounds__(kThreads)
    pull_small_kernel(const uint32_t* release, uint32_t value, const uint64_t* landed,
                      unsigned char* dst) {
  __shared__ uint64_t at[2];
  if (threadIdx.x == 0) {
    if (release) poll_word(reinterpret_cast<uint64_t>(release), value);
    const volatile uint64_t* l = landed;
    if (const uint64_t word = l[2]) poll_word(word, static_cast<uint32_t>(l[3]));
    at[0] = l[0];
    at[1] = l[1];
  }
  __syncthreads();
  copy_bytes(reinterpret_cast<const unsigned char*>(static_cast<uintptr_t>(at[0])), dst, at[1]);
}

// The words kernel at the launch's word width, on `args` (WordArgs or XferArgs).
template <class Args>
Status launch_words(const Launch& l, const Args& args, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(l.grid));
  switch (l.word) {
    case 1:
      words_kernel<1><<<grid, l.threads, 0, s>>>(args);
      break;
    case 2:
      words_kernel<2><<<grid, l.threads, 0, s>>>(args);
      break;
    case 4:
      words_kernel<4><<<grid, l.threads, 0, s>>>(args);
      break;
    case 8:
      words_kernel<8><<<grid, l.threads, 0, s>>>(args);
      break;
    case 16:
      words_kernel<16><<<grid, l.threads, 0, s>>>(args);
      break;
    default:
      return Status(Err::kInternal, "words kernel: bad word width");
  }
  LOOM_CUDA_TRY(cudaGetLastError());
  return Status::ok();
}

template <int W>
Status occupancy_words(int* out) {
  LOOM_CUDA_TRY(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(out, words_kernel<W, WordArgs>, kThreads, 0));
  return Status::ok();
}

}  // namespace

Status read_device_shape(int device, DeviceShape* out) {
  DeviceShape s;
  s.device = device;
  LOOM_CUDA_TRY(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, device));
  // Occupancy is asked of the current device: make `device` current meanwhile.
  int cur = 0;
  LOOM_CUDA_TRY(cudaGetDevice(&cur));
  if (cur != device) LOOM_CUDA_TRY(cudaSetDevice(device));
  Status st = [&]() -> Status {
    LOOM_TRY(occupancy_words<1>(&s.words_ctas_per_sm[0]));
    LOOM_TRY(occupancy_words<2>(&s.words_ctas_per_sm[1]));
    LOOM_TRY(occupancy_words<4>(&s.words_ctas_per_sm[2]));
    LOOM_TRY(occupancy_words<8>(&s.words_ctas_per_sm[3]));
    LOOM_TRY(occupancy_words<16>(&s.words_ctas_per_sm[4]));
    LOOM_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.segs_ctas_per_sm,
                                                                segments_kernel, kThreads, 0));
    return Status::ok();
  }();
  if (cur != device) LOOM_CUDA_TRY(cudaSetDevice(cur));
  LOOM_TRY(st);
  for (int& c : s.words_ctas_per_sm) c = c < 1 ? 1 : c;
  if (s.segs_ctas_per_sm < 1) s.segs_ctas_per_sm = 1;
  if (s.sm_count < 1) s.sm_count = 1;
  *out = s;
  return Status::ok();
}

Status preload(cudaStream_t stream) {
  // Empty launches (no words, no pieces): each kernel runs once and exits.
  for (KernelKind k : {KernelKind::kWords, KernelKind::kTransfer})
    for (int w : {1, 2, 4, 8, 16}) {
      Launch l;
      l.kind = k;
      l.word = w;
      l.grid = 1;
      LOOM_TRY(launch(l, stream));
    }
  Launch l;
  l.kind = KernelKind::kSegments;
  l.grid = 1;
  for (auto& c : l.segs.geom.cls) c.nitems = 0;
  LOOM_TRY(launch(l, stream));
  Launch w;  // words with nothing to move
  w.kind = KernelKind::kWords;
  w.word = 1;
  w.grid = 1;
  std::vector<Launch> some(kBatchMax);
  for (int i = 0; i < kBatchMax; ++i) some[static_cast<size_t>(i)] = i % 2 ? w : l;
  LOOM_TRY(launch_many(some.data(), 2, stream));          // batch_kernel<8>
  LOOM_TRY(launch_many(some.data(), kBatchMid, stream));  // batch_kernel<kBatchMid>
  LOOM_TRY(launch_many(some.data(), kBatchMax, stream));  // batch_kernel<kBatchMax>
  signal_kernel<<<1, kSignalMax, 0, stream>>>(SignalArgs{});
  wait_kernel<<<1, kSignalMax, 0, stream>>>(WaitArgs{});
  copy_from_kernel<<<1, kThreads, 0, stream>>>(nullptr, nullptr);
  LOOM_CUDA_TRY(cudaGetLastError());
  LOOM_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status launch_many(const Launch* ls, int n, cudaStream_t stream, const Tail* tail) {
  // Kernels of the standard shape go kBatchMax to a batch launch, the rest
  // (copies, nothing to do) one by one, in order between the batches.
  const Launch* batch[kBatchMax] = {};
  int nb = 0;
  const TailArgs none{};
  auto flush = [&](const TailArgs& t) -> Status {
    if (nb == 0) return Status::ok();
    const int k = nb;
    nb = 0;
    if (k == 1 && t.n == 0) return launch(*batch[0], stream);
    if (k <= 8) return launch_batch<8>(batch, k, stream, t);
    return k <= kBatchMid ? launch_batch<kBatchMid>(batch, k, stream, t)
                          : launch_batch<kBatchMax>(batch, k, stream, t);
  };
  for (int i = 0; i < n; ++i) {
    const Launch& l = ls[i];
    const bool kernel = (l.kind == KernelKind::kWords || l.kind == KernelKind::kSegments ||
                         l.kind == KernelKind::kTransfer) &&
                        l.threads == kThreads && l.grid > 0 && l.grid < (int64_t{1} << 31);
    if (!kernel) {
      LOOM_TRY(flush(none));
      LOOM_TRY(launch(l, stream));
      continue;
    }
    batch[nb++] = &l;
    if (nb == kBatchMax && i + 1 < n) LOOM_TRY(flush(none));
  }
  if (!tail || tail->n == 0) return flush(none);
  // The last launch writes the words when it is a batch and they fit;
  // otherwise a signal kernel after it (or the caller, `written` set).
  const bool fuse = nb > 0 && tail->counters && tail->n <= kSignalMax;
  if (tail->written) *tail->written = fuse;
  if (fuse) {
    TailArgs t;
    t.n = tail->n;
    t.counters = tail->counters;
    for (int i = 0; i < t.n; ++i) {
      t.word[i] = tail->words[i];
      t.value[i] = tail->values[i];
    }
    return flush(t);
  }
  LOOM_TRY(flush(none));
  return tail->written ? Status::ok() : signal_many(tail->words, tail->values, tail->n, stream);
}

Status alloc_tail_counters(unsigned** out, cudaStream_t stream) {
  void* p = nullptr;
  LOOM_CUDA_TRY(cudaMalloc(&p, kTailCounters * sizeof(unsigned)));
  LOOM_CUDA_TRY(cudaMemsetAsync(p, 0, kTailCounters * sizeof(unsigned), stream));
  *out = static_cast<unsigned*>(p);
  return Status::ok();
}

// One launch of `kernel` per kSignalMax words (SignalArgs or WaitArgs).
template <class Args, class Word>
Status word_batches(void (*kernel)(Args), Word* const* words, const uint32_t* values, int n,
                    cudaStream_t stream) {
  for (int at = 0; at < n; at += kSignalMax) {
    Args a;
    a.n = n - at < kSignalMax ? n - at : kSignalMax;
    for (int i = 0; i < a.n; ++i) {
      a.word[i] = words[at + i];
      a.value[i] = values[at + i];
    }
    kernel<<<1, kSignalMax, 0, stream>>>(a);
    LOOM_CUDA_TRY(cudaGetLastError());
  }
  return Status::ok();
}

Status signal_many(uint32_t* const* words, const uint32_t* values, int n, cudaStream_t stream) {
  return word_batches<SignalArgs>(signal_kernel, words, values, n, stream);
}

Status wait_many(const uint32_t* const* words, const uint32_t* values, int n, cudaStream_t stream) {
  return word_batches<WaitArgs>(wait_kernel, words, values, n, stream);
}

Status wait_published(const uint64_t* from, cudaStream_t stream) {
  wait_published_kernel<<<1, 1, 0, stream>>>(from);
  LOOM_CUDA_TRY(cudaGetLastError());
  return Status::ok();
}

Status pull_small(const uint32_t* release, uint32_t value, const uint64_t* landed, void* dst,
                  size_t max, cudaStream_t stream) {
  const uint64_t grid = std::min<uint64_t>(
      kPullSmallBlocks, std::max<uint64_t>(1, (max + kCopyBlockBytes - 1) / kCopyBlockBytes));
  pull_small_kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      release, value, landed, static_cast<unsigned char*>(dst));
  LOOM_CUDA_TRY(cudaGetLastError());
  return Status::ok();
}

Status copy_from(const uint64_t* from, uint64_t* near, void* dst, size_t max, cudaStream_t stream) {
  LOOM_CUDA_TRY(cudaMemcpyAsync(near, from, 2 * sizeof(uint64_t), cudaMemcpyDefault, stream));
  // Enough blocks for 16 bytes a thread and four passes at `max`, at most 512.
  const uint64_t grid =
      std::min<uint64_t>(512, std::max<uint64_t>(1, (max + kCopyBlockBytes - 1) / kCopyBlockBytes));
  copy_from_kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      near, static_cast<unsigned char*>(dst));
  LOOM_CUDA_TRY(cudaGetLastError());
  return Status::ok();
}

Status launch(const Launch& l, cudaStream_t stream) {
  switch (l.kind) {
    case KernelKind::kNone:
      return Status::ok();
    case KernelKind::kMemcpy:
      LOOM_CUDA_TRY(
          cudaMemcpyAsync(l.dst, l.src, static_cast<size_t>(l.bytes), cudaMemcpyDefault, stream));
      return Status::ok();
    case KernelKind::kWords:
      return launch_words(l, l.words, stream);
    case KernelKind::kSegments:
      segments_kernel<<<static_cast<unsigned>(l.grid), l.threads, 0, stream>>>(l.segs);
      LOOM_CUDA_TRY(cudaGetLastError());
      return Status::ok();
    case KernelKind::kTransfer:
      return launch_words(l, l.xfer, stream);
  }
  return Status(Err::kInternal, "unknown kernel kind");
}

}  // namespace loom::pack::gpu
