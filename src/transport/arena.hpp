// A first-fit sub-allocator of offsets in one block of memory lent once
// (the stream engine's messages of one node, stream/enqueue.hpp): peers map
// the block when a stream communicator is made, so reading a message needs
// no mapping made later, by a thread a stream may be waiting for. MPI-free.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>

namespace loom::transport {

class Arena {
 public:
  explicit Arena(size_t size);
  // The offset of `bytes` free bytes (256-byte aligned), or none.
  std::optional<size_t> take(size_t bytes);
  // Gives back what take() returned for the same `bytes`.
  void give(size_t offset, size_t bytes);
  size_t size() const { return size_; }
  size_t free_bytes() const;

  static constexpr size_t kAlign = 256;

 private:
  static size_t rounded(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  size_t size_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length, never adjacent
};

}  // namespace loom::transport
