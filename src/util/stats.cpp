#include "util/stats.hpp"

#include <bit>
#include <cmath>
#include <cstdio>

namespace loom::stats {
namespace {

// Calls by duration in quarter-octaves of nanoseconds (2^(b/4) ns): a
// median within 19 %, without keeping every sample.
constexpr int kBuckets = 4 * 40;
int bucket(int64_t ns) {
  if (ns < 1) return 0;
  const auto u = static_cast<uint64_t>(ns);
  const int oct = 63 - std::countl_zero(u);
  const int quarter = oct >= 2 ? static_cast<int>((u >> (oct - 2)) & 3) : 0;
  return std::min(kBuckets - 1, 4 * oct + quarter);
}
struct Counter {
  std::atomic<int64_t> ns{0}, calls{0};
  std::atomic<int64_t> by_time[kBuckets] = {};
};
// The bucket's middle, in microseconds.
double bucket_us(int b) {
  const int oct = b / 4, quarter = b % 4;
  return std::ldexp(1.0 + (quarter + 0.5) / 4.0, oct) / 1e3;
}
double median_us(const Counter& c, int64_t n) {
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b)
    if ((seen += c.by_time[b].load(std::memory_order_relaxed)) * 2 >= n) return bucket_us(b);
  return 0;
}
Counter g_counters[kPhases];
const char* const kNames[] = {
#define LOOM_STAT_NAME(id, doc) doc,
    LOOM_STAT_PHASES(LOOM_STAT_NAME)
#undef LOOM_STAT_NAME
};

}  // namespace

std::atomic<bool> g_on{false};

void add(Phase p, int64_t ns) {
  g_counters[p].ns.fetch_add(ns, std::memory_order_relaxed);
  g_counters[p].calls.fetch_add(1, std::memory_order_relaxed);
  g_counters[p].by_time[bucket(ns)].fetch_add(1, std::memory_order_relaxed);
}

void enable(bool on) {
  g_on.store(on, std::memory_order_relaxed);
}

void print(int rank) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  std::fprintf(stderr, "loom stats, rank %d: phase | calls | total ms | mean us | median us\n",
               rank);
  for (int i = 0; i < kPhases; ++i) {
    const int64_t n = g_counters[i].calls.load(), ns = g_counters[i].ns.load();
    if (n == 0) continue;
    std::fprintf(stderr, "loom stats, rank %d: %s | %lld | %.3f | %.2f | %.2f\n", rank, kNames[i],
                 static_cast<long long>(n), static_cast<double>(ns) / 1e6,
                 static_cast<double>(ns) / 1e3 / static_cast<double>(n),
                 median_us(g_counters[i], n));
  }
}

}  // namespace loom::stats
