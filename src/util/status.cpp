#include "util/status.hpp"

namespace loom {

const char* err_name(Err e) {
  switch (e) {
    case Err::kOk:
      return "ok";
    case Err::kInvalidArg:
      return "invalid argument";
    case Err::kNullType:
      return "null or uncommitted datatype";
    case Err::kUnsupported:
      return "unsupported";
    case Err::kOverflow:
      return "overflow";
    case Err::kTruncate:
      return "truncated";
    case Err::kNoMemory:
      return "out of memory";
    case Err::kCuda:
      return "CUDA error";
    case Err::kMpi:
      return "MPI error";
    case Err::kNotFound:
      return "not found";
    case Err::kInternal:
      return "internal error";
    case Err::kStale:
      return "stale mapping";
  }
  return "unknown";
}

}  // namespace loom
