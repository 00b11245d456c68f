// The system profile that loom-measure writes and the model reads: measured
// terms by name, tied to the GPU and MPI library they were measured with.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "model/curve.hpp"
#include "util/status.hpp"

namespace loom::model {

// What a profile is valid for.
struct Identity {
  std::string gpu;  // GPU name
  std::string mpi;  // MPI library version string (may span lines)
};

bool operator==(const Identity& a, const Identity& b);
inline bool operator!=(const Identity& a, const Identity& b) {
  return !(a == b);
}

// Term names are listed in model/cost.hpp. Names are non-empty and contain no
// whitespace or control characters.
struct Profile {
  static constexpr int kVersion = 1;
  Identity id;
  std::string host, date, loom_version;  // informational: where and when measured
  std::map<std::string, Curve> curves;
  std::map<std::string, Surface> surfaces;
  std::map<std::string, LogGOP> loggop;
  std::map<std::string, double> scalars;
};

bool operator==(const Profile& a, const Profile& b);
inline bool operator!=(const Profile& a, const Profile& b) {
  return !(a == b);
}

// kOk, or kInvalidArg naming what is malformed: a bad name, unsorted or
// non-positive bytes, negative or non-finite times, sizes that differ.
Status check_profile(const Profile& p);

// Text, one record per line, starting "loom-profile <version>" and ending
// with "checksum <FNV-1a 64 of all preceding bytes>". Numbers are written in
// the shortest form that reads back to the same double, whatever the locale.
// Written to a temporary file in the same directory and renamed, so readers
// never see half a file; the directory is created if needed.
Status write_profile(const std::string& path, const Profile& p);

// Reads and validates; messages name the path and what to do:
//   kNotFound     no file ("no profile; run loom-measure")
//   kUnsupported  another format version or not a profile ("version")
//   kInvalidArg   checksum mismatch or parse error ("corrupt")
//   kUnsupported  `expect` given and the identity differs (names both)
Result<Profile> read_profile(const std::string& path, const Identity* expect);

// $LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else $HOME/.cache/loom, else "".
std::string cache_dir();
// LOOM_PROFILE if set, else cache_dir()/profile-v<kVersion>-<16 hex digits of
// FNV-1a 64 of gpu + "\n" + mpi>.txt; "" when there is no cache directory.
std::string profile_path(const Identity& id);

uint64_t fnv1a64(std::string_view bytes);

}  // namespace loom::model
