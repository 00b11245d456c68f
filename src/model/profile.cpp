#include "model/profile.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "util/knobs.hpp"

namespace loom::model {
namespace {

constexpr std::string_view kMagic = "loom-profile";
constexpr size_t kMaxFileBytes = size_t{64} << 20;  // far above any real profile

// ---- writing ----

void put_num(std::string& out, double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest exact, locale-free
  out.append(buf, r.ptr);
}

// Free text (an MPI version string spans lines) kept on one line.
void put_escaped(std::string& out, const std::string& s) {
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
}

void put_points(std::string& out, const Curve& c) {
  for (size_t i = 0; i < c.bytes.size(); ++i) {
    out += "  ";
    put_num(out, c.bytes[i]);
    out += ' ';
    put_num(out, c.usec[i]);
    out += ' ';
    put_num(out, c.spread.empty() ? 0.0 : c.spread[i]);
    out += '\n';
  }
}

std::string serialize(const Profile& p) {
  std::string out;
  out.append(kMagic).append(" ").append(std::to_string(Profile::kVersion)).append("\n");
  out += "# written by loom-measure; units: bytes, us, us/byte; loggop fields: L o g G O\n";
  out += "# checksummed: an edited file reads as corrupt\n";
  const std::pair<const char*, const std::string*> text[] = {{"gpu", &p.id.gpu},
                                                             {"mpi", &p.id.mpi},
                                                             {"host", &p.host},
                                                             {"date", &p.date},
                                                             {"loom_version", &p.loom_version}};
  for (const auto& [key, val] : text) {
    out += key;
    out += ' ';
    put_escaped(out, *val);
    out += '\n';
  }
  for (const auto& [name, v] : p.scalars) {
    out.append("scalar ").append(name).append(" ");
    put_num(out, v);
    out += '\n';
  }
  for (const auto& [name, g] : p.loggop) {
    out.append("loggop ").append(name);
    for (double v : {g.L, g.o, g.g, g.G, g.O}) {
      out += ' ';
      put_num(out, v);
    }
    out += '\n';
  }
  for (const auto& [name, c] : p.curves) {
    out.append("curve ")
        .append(name)
        .append(" ")
        .append(std::to_string(c.bytes.size()))
        .append("\n");
    put_points(out, c);
  }
  for (const auto& [name, s] : p.surfaces) {
    out.append("surface ")
        .append(name)
        .append(" ")
        .append(std::to_string(s.block.size()))
        .append("\n");
    for (size_t i = 0; i < s.block.size(); ++i) {
      out += "block ";
      put_num(out, s.block[i]);
      // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict) on " " + string.
      out.append(" ").append(std::to_string(s.by_block[i].bytes.size())).append("\n");
      put_points(out, s.by_block[i]);
    }
  }
  char sum[40];
  std::snprintf(sum, sizeof sum, "checksum %016" PRIx64 "\n", fnv1a64(out));
  return out + sum;
}

Status sys_error(const std::string& path, const char* what, int err) {
  return Status(Err::kInvalidArg,
                path + ": cannot " + what + " profile: " + std::generic_category().message(err));
}

bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// ---- checking ----

bool valid_name(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (c <= 0x20 || c == 0x7f) return false;
  return true;
}

Status bad(const std::string& what) {
  return Status(Err::kInvalidArg, what);
}

Status check_curve(const std::string& name, const Curve& c) {
  size_t n = c.bytes.size();
  if (c.usec.size() != n || (!c.spread.empty() && c.spread.size() != n))
    return bad(name + ": bytes, usec and spread differ in length");
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(c.bytes[i]) || c.bytes[i] <= 0)
      return bad(name + ": bytes must be finite and > 0");
    if (i > 0 && !(c.bytes[i] > c.bytes[i - 1]))
      return bad(name + ": bytes must increase strictly");
    if (!std::isfinite(c.usec[i]) || c.usec[i] < 0)
      return bad(name + ": usec must be finite and >= 0");
    if (!c.spread.empty() && !std::isfinite(c.spread[i]))
      return bad(name + ": spread must be finite");
  }
  return Status::ok();
}

// ---- reading ----

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool parse_num(std::string_view s, double& v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(v);
}

bool parse_count(std::string_view s, size_t& v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool unescape(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return false;
    if (s[i] == '\\') {
      out += '\\';
    } else if (s[i] == 'n') {
      out += '\n';
    } else if (s[i] == 'x' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 &&
               hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      return false;
    }
  }
  return true;
}

// For messages: free text on one line.
std::string one_line(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    bool space = c <= 0x20 || c == 0x7f;
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : static_cast<char>(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return "'" + out + "'";
}

class Parser {
 public:
  Parser(const std::string& path, std::vector<std::string_view> lines)
      : path_(path), lines_(std::move(lines)) {}

  Status run(Profile& p) {
    bool seen[5] = {};
    std::string* text[5] = {&p.id.gpu, &p.id.mpi, &p.host, &p.date, &p.loom_version};
    static constexpr std::string_view kText[5] = {"gpu", "mpi", "host", "date", "loom_version"};
    for (at_ = 1; at_ < lines_.size(); ++at_) {
      std::string_view line = lines_[at_];
      if (line.empty() || line[0] == '#') continue;
      size_t sp = line.find(' ');
      std::string_view key = line.substr(0, sp);
      std::string_view rest = sp == std::string_view::npos ? "" : line.substr(sp + 1);
      bool done = false;
      for (int k = 0; k < 5 && !done; ++k) {
        if (key != kText[k]) continue;
        if (seen[k]) return corrupt("repeated " + std::string(key));
        if (!unescape(rest, *text[k])) return corrupt("bad escape");
        seen[k] = done = true;
      }
      if (done) continue;
      auto tok = split(line);
      if (key == "scalar") {
        double v;
        if (tok.size() != 3 || !parse_num(tok[2], v)) return corrupt("bad scalar");
        if (!p.scalars.emplace(std::string(tok[1]), v).second) return corrupt("repeated name");
      } else if (key == "loggop") {
        LogGOP g;
        if (tok.size() != 7 || !parse_num(tok[2], g.L) || !parse_num(tok[3], g.o) ||
            !parse_num(tok[4], g.g) || !parse_num(tok[5], g.G) || !parse_num(tok[6], g.O))
          return corrupt("bad loggop");
        if (!p.loggop.emplace(std::string(tok[1]), g).second) return corrupt("repeated name");
      } else if (key == "curve") {
        Curve c;
        if (tok.size() != 3) return corrupt("bad curve header");
        LOOM_TRY(points(tok[2], c));
        if (!p.curves.emplace(std::string(tok[1]), std::move(c)).second)
          return corrupt("repeated name");
      } else if (key == "surface") {
        Surface s;
        size_t n;
        if (tok.size() != 3 || !parse_count(tok[2], n) || n > lines_.size() - at_)
          return corrupt("bad surface header");
        for (size_t b = 0; b < n; ++b) {
          ++at_;
          auto bt = at_ < lines_.size() ? split(lines_[at_]) : std::vector<std::string_view>{};
          double blk;
          if (bt.size() != 3 || bt[0] != "block" || !parse_num(bt[1], blk))
            return corrupt("bad block line");
          s.block.push_back(blk);
          s.by_block.emplace_back();
          LOOM_TRY(points(bt[2], s.by_block.back()));
        }
        if (!p.surfaces.emplace(std::string(tok[1]), std::move(s)).second)
          return corrupt("repeated name");
      } else {
        return corrupt("unknown record '" + std::string(key) + "'");
      }
    }
    if (!seen[0] || !seen[1]) return corrupt("no gpu or mpi record");
    Status s = check_profile(p);
    if (!s)
      return Status(Err::kInvalidArg,
                    path_ + ": corrupt profile (" + s.message() + "); re-run loom-measure");
    return Status::ok();
  }

 private:
  Status points(std::string_view count, Curve& c) {
    size_t n;
    if (!parse_count(count, n) || n > lines_.size() - at_ - 1) return corrupt("bad point count");
    for (size_t i = 0; i < n; ++i) {
      ++at_;
      auto t = split(lines_[at_]);
      double x, y, s;
      if (t.size() != 3 || !parse_num(t[0], x) || !parse_num(t[1], y) || !parse_num(t[2], s))
        return corrupt("bad point");
      c.bytes.push_back(x);
      c.usec.push_back(y);
      c.spread.push_back(s);
    }
    return Status::ok();
  }

  Status corrupt(const std::string& what) const {
    return Status(Err::kInvalidArg, path_ + ":" + std::to_string(at_ + 1) + ": corrupt profile (" +
                                        what + "); re-run loom-measure");
  }

  const std::string& path_;
  std::vector<std::string_view> lines_;
  size_t at_ = 0;
};

Result<std::string> slurp(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return Status(Err::kNotFound, path + ": no profile; run loom-measure to make one");
    return sys_error(path, "open", errno);
  }
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return sys_error(path, "read", err);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxFileBytes) {
      ::close(fd);
      return Status(Err::kInvalidArg, path + ": corrupt profile (too large)");
    }
  }
  ::close(fd);
  return data;
}

}  // namespace

bool operator==(const Identity& a, const Identity& b) {
  return a.gpu == b.gpu && a.mpi == b.mpi;
}

bool operator==(const Profile& a, const Profile& b) {
  return a.id == b.id && a.host == b.host && a.date == b.date && a.loom_version == b.loom_version &&
         a.curves == b.curves && a.surfaces == b.surfaces && a.loggop == b.loggop &&
         a.scalars == b.scalars;
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

Status check_profile(const Profile& p) {
  for (const auto& [name, v] : p.scalars) {
    if (!valid_name(name)) return bad("bad term name '" + name + "'");
    if (!std::isfinite(v)) return bad(name + ": not finite");
  }
  for (const auto& [name, g] : p.loggop) {
    if (!valid_name(name)) return bad("bad term name '" + name + "'");
    for (double v : {g.L, g.o, g.g, g.G, g.O})
      if (!std::isfinite(v)) return bad(name + ": not finite");
  }
  for (const auto& [name, c] : p.curves) {
    if (!valid_name(name)) return bad("bad term name '" + name + "'");
    LOOM_TRY(check_curve(name, c));
  }
  for (const auto& [name, s] : p.surfaces) {
    if (!valid_name(name)) return bad("bad term name '" + name + "'");
    if (s.block.size() != s.by_block.size())
      return bad(name + ": block and by_block differ in length");
    for (size_t i = 0; i < s.block.size(); ++i) {
      if (!std::isfinite(s.block[i]) || s.block[i] <= 0)
        return bad(name + ": block lengths must be finite and > 0");
      if (i > 0 && !(s.block[i] > s.block[i - 1]))
        return bad(name + ": block lengths must increase strictly");
      if (s.by_block[i].empty()) return bad(name + ": empty curve for a block length");
      LOOM_TRY(check_curve(name, s.by_block[i]));
    }
  }
  return Status::ok();
}

Status write_profile(const std::string& path, const Profile& p) {
  Status ok = check_profile(p);
  if (!ok) return Status(Err::kInvalidArg, path + ": not written: " + ok.message());
  std::string data = serialize(p);

  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Err::kInvalidArg, path + ": cannot create directory: " + ec.message());

  // Unique per process and call: ranks of one node may write the same profile.
  static std::atomic<unsigned> seq{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seq++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return sys_error(tmp, "create", errno);
  bool written = write_all(fd, data) && ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && written) {
    written = false;
    err = errno;
  }
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (written) err = errno;
    ::unlink(tmp.c_str());
    return sys_error(path, "write", err);
  }
  return Status::ok();
}

Result<Profile> read_profile(const std::string& path, const Identity* expect) {
  Result<std::string> file = slurp(path);
  if (!file) return file.status();
  const std::string& data = *file;
  const std::string again = "; re-run loom-measure";

  // Version first: a future format may checksum differently.
  std::string_view first = std::string_view(data).substr(0, data.find('\n'));
  auto head = split(first);
  int version = 0;
  if (head.size() != 2 || head[0] != kMagic ||
      std::from_chars(head[1].data(), head[1].data() + head[1].size(), version).ec != std::errc())
    return Status(Err::kUnsupported, path + ": not a Loom profile of version " +
                                         std::to_string(Profile::kVersion) +
                                         " (corrupt, or written by another Loom version)" + again);
  if (version != Profile::kVersion)
    return Status(Err::kUnsupported, path + ": profile format version " + std::to_string(version) +
                                         ", this Loom reads version " +
                                         std::to_string(Profile::kVersion) +
                                         ": written by another Loom version" + again);

  // The last line is the checksum of everything before it.
  if (data.empty() || data.back() != '\n')
    return Status(Err::kInvalidArg, path + ": corrupt profile (truncated)" + again);
  size_t last = data.rfind('\n', data.size() - 2);
  last = last == std::string::npos ? 0 : last + 1;
  std::string_view body = std::string_view(data).substr(0, last);
  std::string_view sum = std::string_view(data).substr(last, data.size() - 1 - last);
  char want[40];
  std::snprintf(want, sizeof want, "checksum %016" PRIx64, fnv1a64(body));
  if (sum.substr(0, 9) != "checksum ")
    return Status(Err::kInvalidArg, path + ": corrupt profile (truncated: no checksum)" + again);
  if (sum != want)
    return Status(Err::kInvalidArg, path + ": corrupt profile (checksum mismatch)" + again);

  std::vector<std::string_view> lines;
  for (size_t i = 0; i < body.size();) {
    size_t j = body.find('\n', i);
    lines.push_back(body.substr(i, j - i));
    i = j + 1;
  }
  Profile p;
  LOOM_TRY(Parser(path, std::move(lines)).run(p));

  if (expect && *expect != p.id)
    return Status(Err::kUnsupported, path + ": measured for GPU " + one_line(p.id.gpu) + " / MPI " +
                                         one_line(p.id.mpi) + ", this is GPU " +
                                         one_line(expect->gpu) + " / MPI " + one_line(expect->mpi) +
                                         again);
  return p;
}

std::string cache_dir() {
  const std::string& knob = knobs().cache_dir;
  if (!knob.empty()) return knob;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/loom";  // relative ones are invalid
  const char* home = std::getenv("HOME");
  if (home && home[0]) return std::string(home) + "/.cache/loom";
  return "";
}

std::string profile_path(const Identity& id) {
  const std::string& knob = knobs().profile;
  if (!knob.empty()) return knob;
  std::string dir = cache_dir();
  if (dir.empty()) return "";
  char name[64];
  std::snprintf(name, sizeof name, "profile-v%d-%016" PRIx64 ".txt", Profile::kVersion,
                fnv1a64(id.gpu + "\n" + id.mpi));
  return dir + "/" + name;
}

}  // namespace loom::model
