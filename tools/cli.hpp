// What every Loom tool does alike on its command line: `--help`/`-h` prints
// the usage on stdout and exits 0; a bad option prints "TOOL: why" and a
// pointer to --help on stderr and exits 2 (both before MPI_Init, so they
// work outside a launcher); progress goes to stderr, never into the tables
// and CSV of stdout, from one rank only, and `--quiet` turns it off.
// Header-only and MPI-free: loom-p2p (a plain MPI program) includes it too.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace loom::tools::cli {

constexpr int kUsageError = 2;

inline bool is_help(const char* a) {
  return !std::strcmp(a, "--help") || !std::strcmp(a, "-h");
}

inline bool help_asked(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (is_help(argv[i])) return true;
  return false;
}

// This process's rank as the launcher tells it (Open MPI, MPICH's Hydra,
// PMIx, Slurm), for messages printed before MPI_Init: -1 when unknown.
inline int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return -1;
}

// Usage on stdout (exit 0 follows).
inline int print_help(const char* usage) {
  if (launcher_rank() <= 0) std::fputs(usage, stdout);
  return 0;
}

// "TOOL: why" on stderr, once per job; returns the exit code 2.
inline int usage_error(const char* tool, const std::string& why) {
  if (launcher_rank() <= 0)
    std::fprintf(stderr, "%s: %s\n%s: --help for the usage\n", tool, why.c_str(), tool);
  return kUsageError;
}

// Progress lines: off until enable() (rank 0, not --quiet).
inline bool& progress_on() {
  static bool on = false;
  return on;
}
inline void enable_progress(bool on) {
  progress_on() = on;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
inline void
progress(const char* tool, const char* fmt, ...) {
  if (!progress_on()) return;
  std::fprintf(stderr, "%s: ", tool);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace loom::tools::cli
