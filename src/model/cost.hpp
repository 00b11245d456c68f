// The cost model (DESIGN.md, idea 3): predicted time of each way to move a
// message, from the measured terms of a Profile, and a memo of the choice.
//
// Term names, as loom-measure writes them (times in us, sizes in bytes):
//   surfaces (block length x message bytes):
//     pack_dev, unpack_dev    pack kernel GPU -> GPU scratch, and back
//     pack_host, unpack_host  pack kernel into / out of mapped pinned host memory
//   curves (message bytes):
//     d2h, h2d                pinned copies
//     mpi_on_node             host MPI one-way time to a peer on this node
//     mpi_off_node            the same to another node (falls back to mpi_on_node)
//     ipc_copy                GPU copy out of a peer process's mapped memory
//     mpi_overhead, mpi_gap   sender's call time and stream period, for LogGOP
//   scalars:
//     overhead_device, overhead_oneshot, overhead_staged
//                             Loom's fixed cost per message of each method
//     overhead_*_packed       the same for messages it packs (optional)
//     header_bytes            size of the device method's header (default 128)
// The model:
//   device  = overhead_device + pack_dev + mpi_on_node(header_bytes) + ipc_copy + unpack_dev,
//             only on node, when allowed, and for messages of >= header_bytes;
//             no unpack_dev for contiguous messages (the copy lands in place)
// Each method's terms are summed, times its scale_* (1 when absent), plus its
// overhead: overhead + scale * (sum of terms).
//   oneshot = overhead_oneshot + pack_host + mpi + unpack_host
//   staged  = overhead_staged + pack_dev + d2h + mpi + h2d + unpack_dev
//             in k pipelined chunks of c bytes, the middle three become
//             d2h(c) + mpi(c) + h2d(c) + (k-1) max(d2h(c), mpi(c), h2d(c))
// A missing term makes the methods that need it unusable (+infinity).
// The overheads may be negative: each term was timed alone, with its own
// launch and synchronisation, which the real path partly overlaps. A method
// never takes less than its slowest term.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/curve.hpp"
#include "model/profile.hpp"

namespace loom::model {

namespace term {
inline constexpr const char* kPackDev = "pack_dev";
inline constexpr const char* kUnpackDev = "unpack_dev";
inline constexpr const char* kPackHost = "pack_host";
inline constexpr const char* kUnpackHost = "unpack_host";
inline constexpr const char* kD2H = "d2h";
inline constexpr const char* kH2D = "h2d";
inline constexpr const char* kMpiOnNode = "mpi_on_node";
inline constexpr const char* kMpiOffNode = "mpi_off_node";
inline constexpr const char* kIpcCopy = "ipc_copy";
inline constexpr const char* kMpiOverhead = "mpi_overhead";
inline constexpr const char* kMpiGap = "mpi_gap";
inline constexpr const char* kOverheadDevice = "overhead_device";
inline constexpr const char* kOverheadOneshot = "overhead_oneshot";
inline constexpr const char* kOverheadStaged = "overhead_staged";
// The same for messages Loom packs (not contiguous); optional: without them
// the contiguous ones apply.
inline constexpr const char* kOverheadDevicePacked = "overhead_device_packed";
inline constexpr const char* kOverheadOneshotPacked = "overhead_oneshot_packed";
inline constexpr const char* kOverheadStagedPacked = "overhead_staged_packed";
// How much of the summed terms the real path takes, per method (optional,
// 1 without): the kernels timed alone cost more than inside the path at large
// sizes (a Loom ping-pong at a large size fits them).
inline constexpr const char* kScaleDevice = "scale_device";
inline constexpr const char* kScaleOneshot = "scale_oneshot";
inline constexpr const char* kScaleStaged = "scale_staged";
inline constexpr const char* kScaleDevicePacked = "scale_device_packed";
inline constexpr const char* kScaleOneshotPacked = "scale_oneshot_packed";
inline constexpr const char* kScaleStagedPacked = "scale_staged_packed";
inline constexpr const char* kHeaderBytes = "header_bytes";
// Informational (loom-measure records them; the model does not read them):
// ranks of the node per GPU while measuring, and whether MPS was running.
inline constexpr const char* kRanksPerGpu = "ranks_per_gpu";
inline constexpr const char* kMps = "mps";
}  // namespace term

inline constexpr double kDefaultHeaderBytes = 128;

// The model's own names for the methods (the transport has its own enum).
enum class Method { kOneShot, kStaged, kDevice };
inline constexpr int kNumMethods = 3;
inline constexpr double kUnusable = std::numeric_limits<double>::infinity();
const char* method_name(Method m);  // "oneshot" "staged" "device"

struct Shape {
  double bytes = 0;             // packed bytes of the message
  double block_bytes = 0;       // typical contiguous block (== bytes when contiguous)
  bool contiguous = false;      // pack terms are then taken at block_bytes = bytes
  bool on_node = true;          // peer shares this node
  bool device_allowed = false;  // device method possible for this peer and message
  double chunk_bytes = 0;       // staged goes in pipelined chunks of this size (0: whole)
};

struct Prediction {
  // Indexed by Method; +infinity where unusable.
  double usec[kNumMethods] = {kUnusable, kUnusable, kUnusable};
  Method best = Method::kStaged;  // fastest; ties go to the lower Method; kStaged if none usable
  // "device 12.3 us < oneshot 45.6 us < staged n/a", fastest first.
  std::string explain() const;
};

class Model {
 public:
  explicit Model(Profile p);
  const Profile& profile() const { return profile_; }
  // Thread-safe (no mutable state).
  Prediction predict(const Shape& s) const;
  // Terms the formulas need and the profile lacks (empty: complete).
  std::vector<std::string> missing() const;

 private:
  Profile profile_;
  // Copies of the terms, looked up once.
  Surface pack_dev_, unpack_dev_, pack_host_, unpack_host_;
  Curve d2h_, h2d_, mpi_on_, mpi_off_, ipc_;
  double over_device_, over_oneshot_, over_staged_;                       // +infinity when missing
  double over_device_packed_, over_oneshot_packed_, over_staged_packed_;  // else the above
  double scale_[kNumMethods][2];  // [method][packed], 1 when absent
  double header_bytes_ = kDefaultHeaderBytes;
};

// Thread-safe memo of predictions keyed by (form hash, count, on_node,
// device_allowed), so a repeated message costs a hash lookup. For one Model:
// clear() it when the model changes. Bounded: emptied when an insert finds
// `capacity` entries.
class ChoiceCache {
 public:
  explicit ChoiceCache(size_t capacity = 4096);
  // The cached prediction, or model.predict(shape), stored.
  // *missed (if given) tells whether it was computed now.
  Prediction get(const Model& model, uint64_t form_hash, int64_t count, const Shape& shape,
                 bool* missed = nullptr);
  void clear();  // entries only; hits and misses keep counting
  size_t size() const;
  size_t hits() const;
  size_t misses() const;

 private:
  struct Key {
    uint64_t form;
    int64_t count;
    bool on_node, device_allowed;
    bool operator==(const Key& o) const {
      return form == o.form && count == o.count && on_node == o.on_node &&
             device_allowed == o.device_allowed;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  static constexpr int kShards = 16;
  // Own cache line each: threads on different shards do not contend.
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<Key, Prediction, KeyHash> map;
    size_t hits = 0, misses = 0;
  };

  size_t capacity_;
  std::atomic<size_t> entries_{0};
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace loom::model
