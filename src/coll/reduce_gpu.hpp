// The GPU fold of the collectives: the same bits as host_reduce
// (reduce_op.hpp) for every defined pair, except the payload and sign of NaNs
// that arithmetic (SUM, PROD) produces: the GPU's are canonical. MIN, MAX,
// MINLOC, MAXLOC select operands and keep their NaNs bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "coll/reduce_op.hpp"
#include "util/status.hpp"

namespace loom::coll {

// Most input pointers one kernel launch folds; more inputs fold in further
// launches, in the same left-fold order: out = fold(in[0..15]), then
// out = fold(out, in[16..30]), and so on.
inline constexpr int kGpuReduceMaxInputs = 16;

// out[i] = in[0][i] op ... op in[n-1][i] (see host_reduce), enqueued on
// `stream` on the current device; no synchronisation. `in` is a host array
// of n >= 1 device pointers (this GPU's memory, peer memory mapped by CUDA
// IPC, or mapped host memory); it is read before the call returns. `out` may
// be one of the inputs (the same pointer); with more than 16 inputs that
// costs a stream-ordered temporary. Pointers need no alignment; 16-byte
// vectors are used when the inputs and `out` share their alignment.
Status gpu_reduce(ReduceOp op, Basic b, const void* const* in, int n, void* out, size_t count,
                  cudaStream_t stream);

// The same fold written to each of out[0..nout-1] (1 <= nout <= 16), in one
// pass over the inputs: each output may be an input (each element is read
// before it is written, by the same thread).
Status gpu_reduce_to(ReduceOp op, Basic b, const void* const* in, int n, void* const* outs,
                     int nout, size_t count, cudaStream_t stream);

// gpu_reduce, then waits for `stream`.
Status gpu_reduce_sync(ReduceOp op, Basic b, const void* const* in, int n, void* out, size_t count,
                       cudaStream_t stream);

}  // namespace loom::coll
