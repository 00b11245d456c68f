#include "transport/arena.hpp"

#include <iterator>

namespace loom::transport {

Arena::Arena(size_t size) : size_(size / kAlign * kAlign) {
  if (size_ > 0) free_.emplace(0, size_);
}

std::optional<size_t> Arena::take(size_t bytes) {
  const size_t n = rounded(bytes > 0 ? bytes : 1);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const size_t at = it->first, left = it->second - n;
    free_.erase(it);
    if (left > 0) free_.emplace(at + n, left);
    return at;
  }
  return std::nullopt;
}

void Arena::give(size_t offset, size_t bytes) {
  size_t at = offset, n = rounded(bytes > 0 ? bytes : 1);
  std::lock_guard<std::mutex> lk(mu_);
  auto next = free_.lower_bound(at);
  if (next != free_.end() && at + n == next->first) {  // joins the run after it
    n += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // and the run before it
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += n;
      return;
    }
  }
  free_.emplace(at, n);
}

size_t Arena::free_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t n = 0;
  for (const auto& [at, len] : free_) n += len;
  return n;
}

}  // namespace loom::transport
