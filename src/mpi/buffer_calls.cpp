#include "mpi/buffer_calls.hpp"

#include <dlfcn.h>

#include <climits>

#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "util/log.hpp"

namespace loom::mpi {
namespace {

void log_refusal(const char* fn) {
  LOOM_LOG(kError, kMpi,
           "%s was given a device buffer; Loom does not move device data for it (MPI_ERR_BUFFER)",
           fn);
}

}  // namespace

bool device_arg(const void* buf) {
  return buf != MPI_IN_PLACE && buf != MPI_BOTTOM && on_device(buf);
}

bool device_arg(const void* buf, MPI_Count count, MPI_Datatype type) {
  if (buf == MPI_IN_PLACE) return false;
  // Only the first data byte is looked at: the count just has to be positive.
  const int n = count > INT_MAX ? INT_MAX : static_cast<int>(count);
  return on_device(buf, n, type);
}

int refuse_comm(MPI_Comm comm, const char* fn) {
  log_refusal(fn);
  return raise(comm, MPI_ERR_BUFFER, fn);
}

int refuse_win(MPI_Win win, const char* fn) {
  log_refusal(fn);
  if (win == MPI_WIN_NULL) return raise(MPI_COMM_WORLD, MPI_ERR_BUFFER, fn);
  MPI_Win_call_errhandler(win, MPI_ERR_BUFFER);
  return MPI_ERR_BUFFER;
}

int refuse_file(MPI_File file, const char* fn) {
  log_refusal(fn);
  MPI_File_call_errhandler(file, MPI_ERR_BUFFER);  // MPI_FILE_NULL: the default file handler
  return MPI_ERR_BUFFER;
}

int refuse_none(const char* fn) {
  log_refusal(fn);
  return raise(MPI_COMM_WORLD, MPI_ERR_BUFFER, fn);
}

std::vector<const char*> refused_calls() {
  // The definitions this library exports: Loom's own where it has one (the
  // generated ones are weak), looked up in this library, not the process.
  std::vector<const char*> out;
  Dl_info self;
  if (!dladdr(reinterpret_cast<void*>(&refused_calls), &self) || !self.dli_fname) return out;
  void* lib = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return out;
  for (const BufferCall& c : buffer_calls())
    if (dlsym(lib, c.name) == c.generated) out.push_back(c.name);
  dlclose(lib);
  return out;
}

}  // namespace loom::mpi
