// Internal result codes. Converted to MPI error classes only at the src/mpi
// boundary (see src/type/mpi_errors.hpp), so the MPI-free layers stay MPI-free.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace loom {

enum class Err : int {
  kOk = 0,
  kInvalidArg,   // null pointer, negative count, bad argument
  kNullType,     // MPI_DATATYPE_NULL or a handle Loom never saw committed
  kUnsupported,  // a layout or combiner Loom cannot read: hand it back to the MPI
  kOverflow,     // a size or offset that does not fit in 64 bits
  kTruncate,     // destination smaller than the data
  kNoMemory,
  kCuda,
  kMpi,       // the underlying MPI returned an error
  kNotFound,  // a file Loom looks for is not there (no profile yet)
  kInternal,
  kStale,  // a peer's memory this process still maps from before it was freed and reallocated
};

const char* err_name(Err e);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Err code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status ok() { return {}; }
  bool is_ok() const { return code_ == Err::kOk; }
  explicit operator bool() const { return is_ok(); }
  Err code() const { return code_; }
  const std::string& message() const { return msg_; }

 private:
  Err code_ = Err::kOk;
  std::string msg_;
};

// A value or the Status saying why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) {}     // NOLINT
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

// Return early on a failed Status or Result (one error path, as NCCLCHECK does).
#define LOOM_TRY(expr)                            \
  do {                                            \
    ::loom::Status loom_try_s_ = (expr);          \
    if (!loom_try_s_.is_ok()) return loom_try_s_; \
  } while (0)

}  // namespace loom
