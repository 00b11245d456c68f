// Logging by subsystem and level, filtered by LOOM_LOG / LOOM_LOG_SUBSYS.
#pragma once

#include <cstdarg>

namespace loom {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
enum class Subsys : unsigned { kType = 1, kPack = 2, kModel = 4, kTransport = 8, kMpi = 16 };

bool log_enabled(LogLevel lvl, Subsys s);
void log_set_rank(int rank);  // prefix lines with the MPI rank once known
void log_reload();            // re-read LOOM_LOG after knobs_reload()
[[gnu::format(printf, 3, 4)]] void log_write(LogLevel lvl, Subsys s, const char* fmt, ...);

}  // namespace loom

#define LOOM_LOG(lvl, subsys, ...)                                                   \
  do {                                                                               \
    if (::loom::log_enabled(::loom::LogLevel::lvl, ::loom::Subsys::subsys))          \
      ::loom::log_write(::loom::LogLevel::lvl, ::loom::Subsys::subsys, __VA_ARGS__); \
  } while (0)
#define LOOM_WARN(subsys, ...) LOOM_LOG(kWarn, subsys, __VA_ARGS__)
#define LOOM_INFO(subsys, ...) LOOM_LOG(kInfo, subsys, __VA_ARGS__)
#define LOOM_DEBUG(subsys, ...) LOOM_LOG(kDebug, subsys, __VA_ARGS__)
