// Receiving a device-method message (transport/rendezvous.hpp) into the
// user's buffer: the receive paths of the interposed calls (device or typed
// host buffers, bytes MPICH would refuse typed, channel transfers).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/mover.hpp"
#include "transport/rendezvous.hpp"

namespace loom::mpi {

// The handshake's names, as the MPI layer has always used them.
using transport::Header;
using transport::HeaderKind;
using transport::kChannel;
using transport::kChunks;
using transport::kHeaderBytes;
using transport::kSegment;
using transport::kSmallHeaderBytes;
using transport::kZeroCopy;
using transport::Rendezvous;
using transport::SmallHeader;

// Receive side, shared by every receive path. `st` is the completed
// receive's status; when the bytes it got are a header, the message is
// pulled into the receive's buffer and st's count (and error, on
// truncation) are set as if the MPI had carried the message itself.
// Return: MPI_SUCCESS, MPI_ERR_TRUNCATE, or another error code.

// Sets st as the MPI would for the message of h into `capacity` bytes.
int settle(const Header& h, uint64_t capacity, MPI_Status& st);
// A device message Loom reads: unpacked on the GPU straight from the segment.
int pull_into_device(Rendezvous& rv, const Header& h, transport::Mover& mover,
                     const transport::Message& m, void* user, MPI_Status& st);
// Many kChannel messages landed at once (a completion call's): fetched
// together, each unpacked into its receive's buffer; st[i] settled, and
// the return codes in rc[i].
struct ChannelPull {
  const Header* h;
  transport::Mover* mover;
  const transport::Message* m;
  void* user;
  MPI_Status* st;
  int rc = MPI_SUCCESS;
};
void pull_channel_many(Rendezvous& rv, std::vector<ChannelPull>& pulls);
// A typed host buffer (a receive into host memory, or the host copy of a
// device span): the header bytes arrived typed, so they are read back first.
int check_typed_recv(void* buf, int count, MPI_Datatype type, MPI_Comm comm, MPI_Status& st);
// The message of header h into a typed host buffer: copied down, unpacked.
int pull_into_host(Rendezvous& rv, const Header& h, void* buf, int count, MPI_Datatype type,
                   MPI_Comm comm, MPI_Status& st);
// Whether a host receive must take its message as bytes (*bytes: the room
// to post), because a device-method header (kHeaderBytes) may meet it:
// MPICH 4.0 fails a typed receive whose message ends inside one of the
// type's elements, or past the buffer, and MPI_Request_get_status reports
// that through MPI_COMM_WORLD's handler (seen 2026-11-27). Open MPI
// delivers the bytes whole: always false there.
bool host_recv_as_bytes(const void* buf, int count, MPI_Datatype type, size_t* bytes);
// Finishes a receive host_recv_as_bytes took as bytes into `scratch`
// (st: the MPI's status of it): a device-method header or the message
// itself, into the caller's typed host buffer; st then counts its bytes.
int finish_bytes_recv(const void* scratch, void* buf, int count, MPI_Datatype type, MPI_Comm comm,
                      MPI_Status& st);
// Unpacks n packed bytes into a typed host buffer as a receive would: whole
// elements, then the leading bytes of a partial one where Loom reads the type.
void unpack_typed_host(const void* packed, size_t n, void* buf, int count, MPI_Datatype type,
                       MPI_Comm comm);

}  // namespace loom::mpi
