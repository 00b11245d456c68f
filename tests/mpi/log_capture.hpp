// For tests that provoke Loom errors on purpose. ctest fails a test whose
// output holds a Loom error line (tests/CMakeLists.txt), so such a test
// captures this process's stderr, where Loom logs, around the calls that
// must fail, and checks the lines it expects itself:
//
//   LogCapture log;
//   EXPECT_EQ(MPI_Send_init(dev, ...), MPI_ERR_BUFFER);
//   EXPECT_EQ(log.lines("ERROR").size(), 1u);
//
// Whatever else was written meanwhile is passed on when the capture ends.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace loom::test {

class LogCapture {
 public:
  LogCapture() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = dup(STDERR_FILENO);
    if (file_ && saved_ >= 0) dup2(fileno(file_), STDERR_FILENO);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  // Restores stderr; lines other than Loom's at the levels taken go on to it.
  ~LogCapture() {
    const std::string all = text();
    if (saved_ >= 0) {
      dup2(saved_, STDERR_FILENO);
      close(saved_);
    }
    if (file_) std::fclose(file_);
    std::istringstream in(all);
    for (std::string line; std::getline(in, line);)
      if (!loom_line(line, "ERROR")) std::fprintf(stderr, "%s\n", line.c_str());
  }

  // Everything written to stderr so far.
  std::string text() {
    std::fflush(stderr);
    std::string out;
    if (!file_) return out;
    std::rewind(file_);
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, file_)) > 0;) out.append(buf, n);
    std::fseek(file_, 0, SEEK_END);
    return out;
  }
  // Loom's lines of one level ("ERROR", "WARN", ...), each from its message on.
  std::vector<std::string> lines(const std::string& level) {
    std::vector<std::string> out;
    std::istringstream in(text());
    for (std::string line; std::getline(in, line);)
      if (size_t at = loom_line(line, level)) out.push_back(line.substr(at));
    return out;
  }

 private:
  // Where the message of Loom's line of `level` starts ("[loom 1] ERROR x"), or 0.
  static size_t loom_line(const std::string& line, const std::string& level) {
    if (line.rfind("[loom", 0) != 0) return 0;
    const size_t close = line.find("] ");
    if (close == std::string::npos || line.compare(close + 2, level.size(), level) != 0) return 0;
    return std::min(line.size(), close + 3 + level.size());
  }

  std::FILE* file_ = nullptr;
  int saved_ = -1;
};

}  // namespace loom::test
