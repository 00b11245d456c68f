// Kernel selection (the dispatch layer's host half): from a Layout and the
// device's shape to a prepared plan (done once per Layout), then, per call,
// from the actual pointers to a Launch (word width, kernel, grid). Plain C++:
// CPU tests check the rules and run the plans through the agents on the host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pack/cuda/agent.hpp"
#include "pack/layout.hpp"

namespace loom::pack::gpu {

enum class KernelKind : uint8_t { kNone, kMemcpy, kWords, kSegments, kTransfer };
const char* kernel_name(KernelKind k);

inline constexpr int kThreads = 256;   // threads per CTA of both kernels (their launch bound)
inline constexpr int kWordWidths = 5;  // words kernel instances: W = 1, 2, 4, 8, 16

constexpr int log2_width(int w) {
  return w >= 16 ? 4 : w >= 8 ? 3 : w >= 4 ? 2 : w >= 2 ? 1 : 0;
}

// What the launch shapes depend on, read once per device (SM count, and how
// many CTAs of each kernel fit on one SM at their register use).
struct DeviceShape {
  int device = 0;
  int sm_count = 132;
  int words_ctas_per_sm[kWordWidths] = {8, 8, 8, 8, 8};
  int segs_ctas_per_sm = 8;
};

// The constants of the selection rules, as data (docs/gpu-kernels.md says
// where each comes from). Benchmarks may sweep them.
struct Policy {
  int64_t row_bytes = 256;                     // blocks at least this long: segments kernel
  int64_t row16_bytes = int64_t{1} << 62;      // ... when 16-byte words are possible
  int64_t misaligned_row_bytes = 32;           // ... or this long when words would be < 4 B
  int64_t max_seg_bytes = 65536;               // longest piece one group copies
  int64_t min_seg_bytes = 512;                 // pieces are not cut shorter than this
  int64_t short_piece_bytes = 256;             // shorter pieces (and > kTinyBytes): 8 lanes each
  int64_t max_table_words = int64_t{1} << 22;  // per-tile word table cap (16 MiB)
  int64_t table_block_bytes = 256;             // tiles whose mean block is shorter use the table
  int waves = 1;                               // grid: at most waves x resident CTAs
};

// Once per Layout: everything a launch needs except the pointers.
struct Prepared {
  LayoutKind kind = LayoutKind::kEmpty;
  int64_t total = 0;
  int64_t base = 0;
  int64_t unit_len = 0;  // strided: block length; blocks: packed bytes of a tile
  int64_t nunits = 0;    // blocks or tiles in the message
  int64_t nblocks = 0;   // blocks of one unit (1 when strided)
  int layout_align = 1;  // widest word (<= 16) that block lengths, offsets and strides allow
  Policy policy;
  DeviceShape shape;
  WordGeom words[kWordWidths];  // per word width; table pointer bound later
  bool words_ok[kWordWidths] = {};
  SegArgs segs;                        // piece classes and geometry; pointers bound later
  std::vector<Seg> seg_list;           // kBlocks: one tile's runs, long blocks cut, by class
  int64_t class_at[kSegClasses] = {};  // where each class starts in seg_list
  std::vector<TinyByte> tiny;          // kBlocks: the bytes of one tile's tiny pieces
  std::vector<int32_t> table;          // kBlocks: user offset of each layout_align word of a tile
  bool has_table = false;

  // Points the plans at the arrays the kernels will read (device copies, or
  // the host vectors above for CPU emulation).
  void bind(const Seg* segs_at, const int32_t* table_at, const TinyByte* tiny_at);
};

// From a view (host arrays; a Layout's view() or repeat_view()). The
// prepared plan keeps its own copies of what it needs.
Prepared prepare(const LayoutView& l, const DeviceShape& shape, const Policy& policy = {});
inline Prepared prepare(const Layout& l, const DeviceShape& shape, const Policy& policy = {}) {
  return prepare(l.view(), shape, policy);
}

// One call's launch: which kernel, its word width and shape, its arguments.
struct Launch {
  KernelKind kind = KernelKind::kNone;
  int word = 0;      // words kernel: W
  int64_t grid = 0;  // CTAs
  int threads = kThreads;
  // kMemcpy
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t bytes = 0;
  WordArgs words;
  SegArgs segs;
  XferArgs xfer;  // kTransfer (word width in `word`)
};

// Lanes for pieces of about `len` bytes: at least 8 (so a group takes a
// run's edge bytes in two trips at most), and up to a warp while a lane would
// get more than kShiftItems 16-byte words (one trip of the shifted copy; a
// second trip costs another memory latency: measured on the H200, 1000 B
// pieces ran 81% of D2D with 32 lanes and 78% with 16).
int lanes_for(int64_t len);

// Widest word that the layout and both pointers allow (1..16).
int word_width(const Prepared& p, const void* user, const void* packed);

Launch plan(const Prepared& p, const void* user, const void* packed, bool pack);

// A transfer from a buffer of layout `from` at `src` to one of layout `to`
// at `dst` (the same packed size), in one words kernel: false where either
// layout has no word geometry (contiguous, or a tile without a word table)
// or the sizes differ; the caller then packs and unpacks through scratch.
bool plan_transfer(const Prepared& from, const void* src, const Prepared& to, void* dst,
                   Launch* out);

std::string describe(const Launch& l);

// Lowest set bit of |x| capped at 16; 16 for 0.
int align_of(int64_t x);

}  // namespace loom::pack::gpu
