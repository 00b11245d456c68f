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
#include <vector>

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

// Markdown tables on stdout (table()), and once csv_tables(NAME) is set,
// every table also as CSV, for tools/plot_results.py: the first in NAME,
// the k-th in NAME with "-k" before its extension. A row followed by a
// |---| row is a table's header. Cells are the printed ones, trimmed; a
// number with an "x" after it (a ratio) loses the x. NAME itself is opened
// at once (false: it cannot be written), so a bad path stops a run before
// it measures rather than after.
class CsvTables {
 public:
  static CsvTables& get() {
    static CsvTables t;
    return t;
  }
  bool open(const char* name) {
    name_ = name ? name : "";
    if (name_.empty()) return true;
    first_ = std::fopen(name_.c_str(), "w");
    return first_ != nullptr;
  }
  void line(const std::string& l) {
    if (name_.empty() || l.empty() || l[0] != '|') return;
    std::vector<std::string> cells = split(l);
    if (separator(cells)) {  // the held row was this table's header
      if (held_.empty()) return;
      next_file();
      if (f_) write(held_);
      held_.clear();
      return;
    }
    flush_held();
    held_ = cells;
  }
  ~CsvTables() {
    flush_held();
    if (f_) std::fclose(f_);
    if (first_) std::fclose(first_);  // no table came
  }

 private:
  static std::vector<std::string> split(const std::string& l) {
    std::vector<std::string> out;
    size_t at = 1;
    for (size_t bar; (bar = l.find('|', at)) != std::string::npos; at = bar + 1) {
      std::string c = l.substr(at, bar - at);
      const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
      c = a == std::string::npos ? "" : c.substr(a, b - a + 1);
      if (c.size() > 1 && c.back() == 'x') {
        char* end = nullptr;
        std::strtod(c.c_str(), &end);
        if (end == c.c_str() + c.size() - 1) c.pop_back();
      }
      out.push_back(c);
    }
    return out;
  }
  static bool separator(const std::vector<std::string>& cells) {
    if (cells.empty()) return false;
    for (const std::string& c : cells)
      if (c.empty() || c.find_first_not_of("-:") != std::string::npos) return false;
    return true;
  }
  void next_file() {
    if (f_) std::fclose(f_);
    f_ = nullptr;
    if (++tables_ == 1 && first_) {
      f_ = first_;
      first_ = nullptr;
      return;
    }
    std::string n = name_;
    if (tables_ > 1) {
      const size_t dot = n.rfind('.'), slash = n.rfind('/');
      const size_t at =
          dot == std::string::npos || (slash != std::string::npos && dot < slash) ? n.size() : dot;
      n.insert(at, "-" + std::to_string(tables_));
    }
    f_ = std::fopen(n.c_str(), "w");
    if (!f_) std::fprintf(stderr, "cannot write %s\n", n.c_str());
  }
  void flush_held() {
    if (!held_.empty() && f_) write(held_);
    held_.clear();
  }
  void write(const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string& c = cells[i];
      if (i) std::fputc(',', f_);
      if (c.find_first_of(",\"") == std::string::npos) {
        std::fputs(c.c_str(), f_);
        continue;
      }
      std::fputc('"', f_);
      for (char ch : c) {
        if (ch == '"') std::fputc('"', f_);
        std::fputc(ch, f_);
      }
      std::fputc('"', f_);
    }
    std::fputc('\n', f_);
  }
  std::string name_;
  std::FILE* f_ = nullptr;
  std::FILE* first_ = nullptr;  // NAME, opened by open(), until the first table
  int tables_ = 0;
  std::vector<std::string> held_;
};

// False when NAME cannot be written (the caller says so).
inline bool csv_tables(const char* name) {
  return CsvTables::get().open(name);
}

// printf to stdout; the table lines in it also go to csv_tables' files.
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline void
table(const char* fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string text(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(text.data(), text.size() + 1, fmt, again);
  va_end(again);
  std::fputs(text.c_str(), stdout);
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    CsvTables::get().line(text.substr(at, nl - at));
    at = nl + 1;
  }
}

}  // namespace loom::tools::cli
