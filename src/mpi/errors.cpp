#include "mpi/errors.hpp"

#include "util/log.hpp"

namespace loom::mpi {

int error_class(Err e) {
  switch (e) {
    case Err::kOk:
      return MPI_SUCCESS;
    case Err::kInvalidArg:
      return MPI_ERR_ARG;
    case Err::kNullType:
      return MPI_ERR_TYPE;
    case Err::kUnsupported:
      return MPI_ERR_UNSUPPORTED_OPERATION;
    case Err::kOverflow:
      return MPI_ERR_COUNT;
    case Err::kTruncate:
      return MPI_ERR_TRUNCATE;
    case Err::kNoMemory:
      return MPI_ERR_NO_MEM;
    case Err::kCuda:
      return MPI_ERR_OTHER;
    case Err::kMpi:
      return MPI_ERR_OTHER;
    case Err::kInternal:
      return MPI_ERR_INTERN;
    case Err::kNotFound:
      return MPI_ERR_FILE;
    case Err::kStale:
      return MPI_ERR_OTHER;
  }
  return MPI_ERR_OTHER;
}

int raise(MPI_Comm comm, int mpi_class, const char* what) {
  LOOM_INFO(kMpi, "error raised to the application: %s", what);  // the handler reports it
  MPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, mpi_class);
  return mpi_class;
}

int raise(MPI_Comm comm, const Status& s) {
  return raise(comm, error_class(s.code()), s.message().c_str());
}

}  // namespace loom::mpi
