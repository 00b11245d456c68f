// GPU pack/unpack engine: moves a Layout's bytes between a user buffer in GPU
// memory and a packed buffer (GPU memory, or mapped pinned host memory) with
// one stream-ordered launch. MPI-free; plain C++ for its callers.
//
//   auto gl = GpuLayout::create(layout);          // once per Layout: uploads, selects
//   gpu_pack(*gl, user, packed, stream);          // per message: < 1 us of host work
//
// The bytes produced equal host_pack's; unpack writes exactly the layout's
// bytes (gaps are untouched). A layout that overlaps itself may be packed,
// but unpacking into it is a race (MPI forbids such receive types).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pack/layout.hpp"
#include "util/status.hpp"

namespace loom::pack {

namespace gpu {
struct Prepared;
}

// A Layout made ready for the GPU: the kernel choice and launch shapes for it
// (selected once here), and device copies of its per-tile arrays. Tied to the
// device that was current at create(); read-only afterwards, so one GpuLayout
// may serve concurrent packs on several streams.
class GpuLayout {
 public:
  static Result<GpuLayout> create(const Layout& l);
  // From a view with host arrays (e.g. repeat_view()); they are copied.
  static Result<GpuLayout> create(const LayoutView& v);

  GpuLayout(GpuLayout&&) noexcept;
  GpuLayout& operator=(GpuLayout&&) noexcept;
  ~GpuLayout();

  LayoutKind kind() const;
  int64_t total() const;  // packed bytes
  int device() const;
  size_t device_bytes() const;  // device memory this layout holds
  // The layout with its blocks/prefix arrays in device memory (kBlocks), for
  // device code that wants packed_to_offset(); empty arrays otherwise.
  LayoutView device_view() const;
  std::string describe() const;  // the layout and the prepared kernels

  const gpu::Prepared& prepared() const;  // for the engine and its tests

 private:
  struct Impl;
  explicit GpuLayout(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when a CUDA device can be used (false, quietly, with no GPU or driver).
bool gpu_available();

// Loads the pack kernels on the current device now (once a process): their
// first launch under CUDA's lazy loading may synchronise the whole context,
// which could deadlock a thread that a stream waits on (Loom's stream thread).
Status gpu_preload();

// Asynchronous, ordered on `stream`: pack reads `user` (the buffer the
// layout's offsets start from) and writes total() bytes at `packed`; unpack
// does the reverse. Returns once the work is enqueued; buffers must stay
// alive until the stream reaches it.
Status gpu_pack(const GpuLayout& l, const void* user, void* packed, cudaStream_t stream);
Status gpu_unpack(const GpuLayout& l, const void* packed, void* user, cudaStream_t stream);

// Asynchronous, ordered on `stream`: moves the packed bytes of layout
// `from` at `src` into layout `to` at `dst` in one kernel, with no packed
// buffer between (a peer's buffer read in its own layout). kUnsupported
// where the pair has no common word kernel (a contiguous side, a tile
// without a word table, different sizes): pack and unpack instead.
Status gpu_transfer(const GpuLayout& from, const void* src, const GpuLayout& to, void* dst,
                    cudaStream_t stream);

// gpu_transfer has a kernel for these layouts and pointers.
bool gpu_transfer_possible(const GpuLayout& from, const void* src, const GpuLayout& to,
                           const void* dst);

// The same, then waits for `stream`.
Status gpu_pack_sync(const GpuLayout& l, const void* user, void* packed, cudaStream_t stream);
Status gpu_unpack_sync(const GpuLayout& l, const void* packed, void* user, cudaStream_t stream);

// Many packs and unpacks, in order on `stream`, in few launches: their
// kernels go up to 16 to one batch launch (a launch costs microseconds of
// host time; a batch of 100 small messages would pay it 100 times).
struct GpuJob {
  const GpuLayout* layout = nullptr;
  const void* user = nullptr;  // the buffer the layout's offsets start from
  void* packed = nullptr;
  bool pack = true;  // false: unpack from packed into user
  // Set: a transfer (gpu_transfer) from `layout` at `user` into this
  // layout at `packed`; it must be possible (gpu_transfer_possible).
  const GpuLayout* into = nullptr;
};
// `then`: words to write after the jobs, as gpu_signal_many would; their
// last launch writes them itself where it can (a launch saved).
struct GpuSignal {
  uint32_t* const* words = nullptr;  // device pointers
  const uint32_t* values = nullptr;
  size_t n = 0;
  unsigned* counters = nullptr;  // gpu_signal_counters(), one per stream; null: no fusing
  // Set: *written tells whether the last launch writes the words; where it
  // cannot (a copy, no kernel), they are left to the caller.
  bool* written = nullptr;
};
Status gpu_run_many(const GpuJob* jobs, size_t n, cudaStream_t stream,
                    const GpuSignal* then = nullptr);
// Device memory the fused signals of `stream` count in, zeroed on it
// (never freed: freeing would synchronise the device).
Result<unsigned*> gpu_signal_counters(cudaStream_t stream);
// After the work before it on `stream`: a system-wide fence, then
// words[i] = values[i] for each i (device pointers), in one launch per 64.
Status gpu_signal_many(uint32_t* const* words, const uint32_t* values, size_t n,
                       cudaStream_t stream);

// After the work before it on `stream`: the stream goes on once every
// words[i] (device pointers) has reached values[i] (mod 2^32), in one
// launch per 64; the work after it sees what the words' writers announced.
Status gpu_wait_many(const uint32_t* const* words, const uint32_t* values, size_t n,
                     cudaStream_t stream);

// After the work before it on `stream`: copies from[1] bytes from address
// from[0] into dst (at most `max`), both read from `from` (mapped memory)
// only when the stream gets there: the host may publish them after the copy
// was enqueued, before the stream's wait ends. `near`: two words of device
// memory the stream's copies use in turn (one per stream suffices).
Status gpu_copy_from(const uint64_t* from, uint64_t* near, void* dst, size_t max,
                     cudaStream_t stream);

// After the work before it on `stream`: waits until the word at address
// from[0] (read when the stream gets here, from mapped memory; 0: no wait)
// reaches from[1] (mod 2^32).
Status gpu_wait_published(const uint64_t* from, cudaStream_t stream);

// A pulled receive of at most gpu_pull_small_max() bytes in one launch:
// waits until *release reaches value (device address; null: no wait), then
// reads landed[0..3] (mapped memory: source, bytes, a word to wait for and
// its value, 0: none), waits for that word, and copies the bytes to dst.
Status gpu_pull_small(const uint32_t* release, uint32_t value, const uint64_t* landed, void* dst,
                      size_t max, cudaStream_t stream);
size_t gpu_pull_small_max();

// Which kernel, word width and grid a call with these pointers would use.
std::string gpu_plan(const GpuLayout& l, const void* user, const void* packed, bool pack);

}  // namespace loom::pack
