#include "util/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "util/knobs.hpp"

namespace loom {
namespace {

std::atomic<int> g_level{-1};  // -1: not read yet
std::atomic<unsigned> g_subsys{~0u};
std::atomic<int> g_rank{-1};

int parse_level(const std::string& s) {
  if (s == "error") return 0;
  if (s == "warn" || s.empty()) return 1;
  if (s == "info") return 2;
  if (s == "debug") return 3;
  return 1;
}

unsigned parse_subsys(const std::string& s) {
  if (s.empty() || s == "all") return ~0u;
  unsigned m = 0;
  const struct {
    const char* name;
    Subsys bit;
  } names[] = {{"type", Subsys::kType},
               {"pack", Subsys::kPack},
               {"model", Subsys::kModel},
               {"transport", Subsys::kTransport},
               {"mpi", Subsys::kMpi}};
  for (const auto& n : names)
    if (s.find(n.name) != std::string::npos) m |= static_cast<unsigned>(n.bit);
  return m;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
  }
  return "?";
}

}  // namespace

void log_reload() {
  g_level.store(parse_level(knobs().log));
  g_subsys.store(parse_subsys(knobs().log_subsys));
}

bool log_enabled(LogLevel lvl, Subsys s) {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    log_reload();
    l = g_level.load();
  }
  return static_cast<int>(lvl) <= l &&
         (g_subsys.load(std::memory_order_relaxed) & static_cast<unsigned>(s)) != 0;
}

void log_set_rank(int rank) {
  g_rank.store(rank);
}

void log_write(LogLevel lvl, Subsys, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  int r = g_rank.load();
  if (r >= 0)
    std::fprintf(stderr, "[loom %d] %s %s\n", r, level_name(lvl), buf);
  else
    std::fprintf(stderr, "[loom] %s %s\n", level_name(lvl), buf);
}

}  // namespace loom
