// Every MPI function that takes a user data buffer, as this MPI's mpi.h
// declares them (cmake/gen_buffer_calls.py makes the list at build time).
// Loom moves device data for the calls it defines; each other one has a
// generated interposer that refuses device buffers with MPI_ERR_BUFFER
// through the communicator's, window's or file's error handler, with one
// log line naming the call, and passes everything else to the MPI.
#pragma once

#include <mpi.h>

#include <vector>

#include "mpi/next.hpp"
#include "mpi_buffer_calls.hpp"

namespace loom::mpi {

// A buffer argument that holds device memory while Loom is active (never
// MPI_IN_PLACE or MPI_BOTTOM). With a count and type: the first data byte
// counts too (a positive lower bound, absolute addresses).
bool device_arg(const void* buf);
bool device_arg(const void* buf, MPI_Count count, MPI_Datatype type);

// Logs "<fn> was given a device buffer ..." and raises MPI_ERR_BUFFER on the
// object's handler (none: MPI_COMM_WORLD's); returns the code to hand back.
int refuse_comm(MPI_Comm comm, const char* fn);
int refuse_win(MPI_Win win, const char* fn);
int refuse_file(MPI_File file, const char* fn);
int refuse_none(const char* fn);

// A generated interposer: the function's name and the generated body.
struct BufferCall {
  const char* name;
  void* generated;
};
const std::vector<BufferCall>& buffer_calls();
// The calls whose exported definition in Loom is the generated one: those
// refused for device buffers (the others move device data).
std::vector<const char*> refused_calls();

}  // namespace loom::mpi
