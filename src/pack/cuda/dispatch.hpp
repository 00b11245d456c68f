// The launching half of the dispatch layer: runs a Launch that plan() built.
// Plain C++ declarations; the kernels live in dispatch.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pack/cuda/policy.hpp"
#include "util/status.hpp"

namespace loom::pack::gpu {

// SM count of `device` and the occupancy of each kernel there.
Status read_device_shape(int device, DeviceShape* out);

// Runs every kernel once, with nothing to move, and waits: with CUDA's lazy
// loading a kernel's first launch loads it, which may synchronise the whole
// context, and so wait for any stream that waits on a thread of Loom's own.
Status preload(cudaStream_t stream);

// Enqueues the launch on `stream` and checks the launch itself.
Status launch(const Launch& l, cudaStream_t stream);

// The launches in order, kernels kBatchMax to one batch launch (copies and
// launches of another shape one by one between them).
inline constexpr int kBatchMax = 48;
// Batches of 9 to kBatchMid jobs launch with the parameters of kBatchMid.
inline constexpr int kBatchMid = 32;
// One kernel per kSignalMax words: a system-wide fence, then words[i] =
// values[i] (device pointers: mapped host memory or device memory).
inline constexpr int kSignalMax = 64;

// Words to write after a run of launches, as signal_many would: the run's
// last batch launch writes them itself where it can (at most kSignalMax
// words, `counters` set), which saves the stream a launch. `counters`:
// kTailCounters of device memory, zero, used by one stream only (a
// launch leaves them zero for the next).
struct Tail {
  uint32_t* const* words = nullptr;
  const uint32_t* values = nullptr;
  int n = 0;
  unsigned* counters = nullptr;
  // Set: *written says whether the last launch writes the words; when it
  // cannot, they are left to the caller instead of a signal kernel.
  bool* written = nullptr;
};
inline constexpr int kTailCounters = kBatchMax + 1;
// Zeroed on `stream`, the one stream that uses them.
Status alloc_tail_counters(unsigned** out, cudaStream_t stream);
Status launch_many(const Launch* ls, int n, cudaStream_t stream, const Tail* tail = nullptr);

Status signal_many(uint32_t* const* words, const uint32_t* values, int n, cudaStream_t stream);
// One kernel per kSignalMax words: each thread polls its word (system scope,
// acquire) until it has reached its value (mod 2^32); the work after it on
// the stream sees what the words' writers wrote before them.
Status wait_many(const uint32_t* const* words, const uint32_t* values, int n, cudaStream_t stream);

// Copies from[1] bytes from address from[0] to dst, both read when the
// stream gets there (`from`: mapped memory, copied to `near`, two words of
// device memory, first); `max` bounds the bytes and sizes the grid.
Status copy_from(const uint64_t* from, uint64_t* near, void* dst, size_t max, cudaStream_t stream);
Status wait_published(const uint64_t* from, cudaStream_t stream);
// Bytes a block of copy_from / pull_small moves: 16 a thread, four passes.
constexpr uint64_t kCopyBlockBytes = uint64_t{kThreads} * 16 * 4;
// pull_small's grid at most: its blocks poll mapped host words.
constexpr int kPullSmallBlocks = 2;
Status pull_small(const uint32_t* release, uint32_t value, const uint64_t* landed, void* dst,
                  size_t max, cudaStream_t stream);

}  // namespace loom::pack::gpu
