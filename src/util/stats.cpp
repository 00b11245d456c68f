#include "util/stats.hpp"

#include <cstdio>

namespace loom::stats {
namespace {

struct Counter {
  std::atomic<int64_t> ns{0}, calls{0};
};
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
}

void enable(bool on) {
  g_on.store(on, std::memory_order_relaxed);
}

void print(int rank) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  std::fprintf(stderr, "loom stats, rank %d: phase | calls | total ms | mean us\n", rank);
  for (int i = 0; i < kPhases; ++i) {
    const int64_t n = g_counters[i].calls.load(), ns = g_counters[i].ns.load();
    if (n == 0) continue;
    std::fprintf(stderr, "loom stats, rank %d: %s | %lld | %.3f | %.2f\n", rank, kNames[i],
                 static_cast<long long>(n), static_cast<double>(ns) / 1e6,
                 static_cast<double>(ns) / 1e3 / static_cast<double>(n));
  }
}

}  // namespace loom::stats
