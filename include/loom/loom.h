/* Loom public C API: extensions and introspection beside standard MPI. */
#ifndef LOOM_LOOM_H
#define LOOM_LOOM_H

#include <mpi.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1

/* Sets up / tears down Loom's runtime. The interposed MPI_Init and
 * MPI_Finalize call these; programs that link Loom without interposition
 * call them after MPI_Init and before MPI_Finalize. Idempotent. */
int loom_init(void);
int loom_finalize(void);

/* Tells Loom that `type` was committed / is about to be freed (the interposed
 * MPI_Type_commit and MPI_Type_free do this). */
int loom_type_commit(MPI_Datatype type);
int loom_type_free(MPI_Datatype type);

/* MPI_Pack / MPI_Unpack semantics, done by Loom's engines. Errors go through
 * the communicator's error handler and come back as MPI error codes. Types
 * Loom cannot read are handed to the MPI's own PMPI_Pack / PMPI_Unpack. */
int loom_pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize,
              int* position, MPI_Comm comm);
int loom_unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount,
                MPI_Datatype type, MPI_Comm comm);

/* Writes what Loom made of `type` (IR, canonical form, hash, extents and the
 * kernel layout for one element) into buf as text, truncated to len bytes
 * including the terminating NUL. Returns MPI_SUCCESS or an MPI error code. */
int loom_type_describe(MPI_Datatype type, char* buf, size_t len);

/* How this rank moves device messages from now on, as LOOM_METHOD does:
 * "device", "oneshot", "staged" or "auto". "device" needs the device method,
 * which is on only when MPI_Init found every rank able to use it (LOOM_METHOD
 * device or auto there). Any rank may switch at any time: receivers take
 * every method. Returns MPI_SUCCESS, or MPI_ERR_ARG for an unknown name or
 * an unavailable method. For benchmarks and experiments. */
int loom_set_method(const char* name);

/* Switches how this rank's collectives on device buffers run, as
 * LOOM_COLL_METHOD names them: "node", "staged", "nccl", "mirror" or "auto".
 * Every rank of a communicator must switch alike before its next
 * collective. Returns MPI_SUCCESS, or MPI_ERR_ARG for an unknown name. For
 * benchmarks. */
int loom_set_coll_method(const char* name);

/* How many collectives on device buffers this process has run as schedules
 * of Loom's point-to-point messages: nonblocking calls (MPI_I...) and each
 * MPI_Start of a persistent one (MPI_..._init). For tests and benchmarks. */
int loom_coll_schedules(long long* count);

/* How many blocking collectives this process has run staged through host
 * memory in pipelined chunks (LOOM_COLL_PIPELINE_*: ranks on several nodes,
 * or no CUDA IPC). For tests and benchmarks. */
int loom_coll_staged(long long* count);

/* Why a device message of `count` elements of `type` moves as it does: its
 * canonical form and kernel layout, the model's predicted one-way time of
 * each method (from loom-measure's profile; "no profile" without one) and
 * the method `auto` picks, to a peer on this node (peer_on_node != 0) or off
 * it. Text into buf, truncated to len bytes including the NUL. Returns
 * MPI_SUCCESS or an MPI error code (MPI_ERR_TYPE for a type Loom does not
 * know). LOOM_LOG=info logs the same line the first time each case is met. */
int loom_explain(MPI_Datatype type, int count, int peer_on_node, char* buf, size_t len);

/* The same as numbers: the predicted one-way time in microseconds of the
 * device, one-shot and staged methods in usec[0], usec[1], usec[2] (-1 where
 * a method cannot be used, or without a profile), and the method `auto`
 * picks now in *method (0 device, 1 one-shot, 2 staged). */
int loom_predict(MPI_Datatype type, int count, int peer_on_node, double usec[3], int* method);

/* 1 while Loom is active: device buffers may be passed to the MPI calls Loom
 * intercepts (the name CUDA-aware MPIs use, so mpi4py and others find it). */
int MPIX_Query_cuda_support(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_H */
