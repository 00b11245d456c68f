/* Loom's stream-triggered ("CPU-free") communication: MPICH's MPIX_Stream
 * enqueue API and the MPIS_* persistent queue API of the MPI Advance
 * stream-triggering library, on any MPI (docs/stream.md).
 *
 * Operations enqueued on a GPU stream run when the stream reaches them:
 * pack and unpack kernels go on the stream, a Loom progress thread moves
 * the bytes through the MPI, and the stream waits on a flag for what must
 * have happened before it goes on. The application thread never waits for
 * the GPU. The MPI must give MPI_THREAD_MULTIPLE. */
#ifndef LOOM_STREAM_H
#define LOOM_STREAM_H

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MPICH's stream API (MPICH 4.2 manual). MPICH >= 4.1 declares it in
 * mpi.h (MPIX_STREAM_NULL is then a macro) and Loom interposes the same
 * functions with MPICH's types; for other MPIs Loom declares it here. ---- */
#ifndef MPIX_STREAM_NULL
typedef struct loom_mpix_stream* MPIX_Stream;
#define MPIX_STREAM_NULL ((MPIX_Stream)0)
#define LOOM_DECLARES_MPIX_STREAM 1

/* Stores value_size bytes as hex text under key (MPICH's encoding: two
 * lowercase hex digits a byte, in memory order). */
int MPIX_Info_set_hex(MPI_Info info, const char* key, const void* value, int value_size);
/* info "type" = "cudaStream_t" and "value" = the stream (MPIX_Info_set_hex),
 * or MPI_INFO_NULL for a stream with no GPU stream (no enqueue on it). */
int MPIX_Stream_create(MPI_Info info, MPIX_Stream* stream);
int MPIX_Stream_free(MPIX_Stream* stream);
int MPIX_Stream_comm_create(MPI_Comm comm, MPIX_Stream stream, MPI_Comm* newcomm);
int MPIX_Stream_comm_create_multiplex(MPI_Comm comm, int count, MPIX_Stream array_of_streams[],
                                      MPI_Comm* newcomm);
int MPIX_Comm_get_stream(MPI_Comm comm, int idx, MPIX_Stream* stream);
int MPIX_Stream_send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                     MPI_Comm comm, int source_stream_index, int dest_stream_index);
int MPIX_Stream_recv(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                     MPI_Comm comm, int source_stream_index, int dest_stream_index,
                     MPI_Status* status);
int MPIX_Send_enqueue(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                      MPI_Comm comm);
int MPIX_Recv_enqueue(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                      MPI_Comm comm, MPI_Status* status);
int MPIX_Isend_enqueue(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                       MPI_Comm comm, MPI_Request* request);
int MPIX_Irecv_enqueue(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                       MPI_Comm comm, MPI_Request* request);
int MPIX_Wait_enqueue(MPI_Request* request, MPI_Status* status);
int MPIX_Waitall_enqueue(int count, MPI_Request array_of_requests[], MPI_Status* array_of_statuses);
int MPIX_Allreduce_enqueue(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                           MPI_Op op, MPI_Comm comm);
#endif /* MPIX_STREAM_NULL */

/* ---- The persistent queue API (MPI Advance stream-triggering, 7/25/24).
 * Requests are matched once (MPIS_Match); each MPIS_Enqueue_start is then
 * pure data movement in the queue's stream order. ---- */
typedef uintptr_t MPIS_Queue;
typedef struct MPIS_Request_struct* MPIS_Request;

#define MPIS_SUCCESS 0
#define MPIS_QUEUE_NULL ((MPIS_Queue)0)
#define MPIS_REQUEST_NULL ((MPIS_Request)0)

/* Every queue type runs on Loom's engine; extra_address points to the
 * cudaStream_t the queue is bound to. */
typedef enum MPIS_Queue_type {
  THREAD = 0,
  THREAD_SERIALIZED = 1,
  GPU_MEM_OPS = 3,
  HPE = 4,
  MPICH_IMPL = 5,
  CXI = 6
} MPIS_Queue_type;

int MPIS_Queue_init(MPIS_Queue* queue, MPIS_Queue_type type, void* extra_address);
int MPIS_Queue_free(MPIS_Queue* queue);
/* The host waits until every operation the queue started has completed. */
int MPIS_Queue_wait(MPIS_Queue queue);
int MPIS_Send_init(const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Info info, MPIS_Request* request);
int MPIS_Recv_init(void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                   MPI_Comm comm, MPI_Info info, MPIS_Request* request);
/* Pairs a request with its peer's (wildcards are resolved here; a receive's
 * status tells the source and tag). Both sides call it; Matchall matches
 * several at once in any order. */
int MPIS_Match(MPIS_Request* request, MPI_Status* status);
int MPIS_Matchall(int count, MPIS_Request requests[], MPI_Status statuses[]);
/* A round of the requests starts when the queue's stream reaches this point. */
int MPIS_Enqueue_start(MPIS_Queue queue, MPIS_Request* request);
int MPIS_Enqueue_startall(MPIS_Queue queue, int count, MPIS_Request requests[]);
/* The stream goes on once every round started on the queue has completed
 * (receives: their data is in the user's buffers). */
int MPIS_Enqueue_waitall(MPIS_Queue queue);
int MPIS_Request_free(MPIS_Request* request);
int MPIS_Request_freeall(int count, MPIS_Request requests[]);

/* ---- Emulated streams: an ordered host executor that stands in for a
 * cudaStream_t (in MPIX_Stream_create's info and MPIS_Queue_init), so the
 * stream APIs run and are tested without a GPU. Emulated streams take host
 * memory (and the LOOM_TEST_HOST_AS_DEVICE test mode's buffers). ---- */
int loom_host_stream_create(void** stream);
int loom_host_stream_free(void* stream);
/* Runs fn(arg) when the stream reaches this point: on an emulated stream on
 * its executor, on a CUDA stream through cudaLaunchHostFunc. */
int loom_stream_launch_host(void* stream, void (*fn)(void*), void* arg);
/* Waits until the stream (emulated or CUDA) has done all its work. */
int loom_stream_synchronize(void* stream);

/* Host-side actions of the stream engine so far (operations posted to the
 * MPI, completions handled): what a benchmark divides by its rounds. */
int loom_stream_host_actions(long long* count);
/* MPIS rounds (either end) this process started on Loom's on-node pair
 * path, where the two streams move the data with no host action at all. */
int loom_stream_pair_rounds(long long* count);
/* MPIX_*_enqueue device messages of this process that went by the device
 * method's protocol (LOOM_STREAM_LEND): sends packed on their stream into a
 * segment lent to the receiver, and receives whose stream copied the bytes
 * from the sender's memory where they lay. */
int loom_stream_lent_messages(long long* count);
/* MPIX_*_enqueue receives of this process posted to the MPI when they were
 * enqueued (LOOM_STREAM_EARLY_RECV), not when their stream reached them. */
int loom_stream_early_receives(long long* count);
/* MPIX_*_enqueue sends of this process lent to a process of the node whose
 * headers were posted when they were enqueued (LOOM_STREAM_EARLY_SEND). */
int loom_stream_early_sends(long long* count);
/* MPIX_Isend_enqueue packs this process held back to launch together with
 * later ones (LOOM_STREAM_HOLD). */
int loom_stream_held_sends(long long* count);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_STREAM_H */
