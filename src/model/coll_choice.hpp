// The model's engine choice for blocking collectives on one node: the node
// engine or the MPI's own on host mirrors, from the times loom-measure
// took of each (DESIGN.md, idea 3). MPI-free and CUDA-free.
//
// Terms (curves: microseconds of one call, slowest rank, against the bytes
// each rank receives), one per engine, call and number of ranks:
//   coll_node_<call>_np<ranks>, coll_mirror_<call>_np<ranks>
// <call> is the MPI name in lower case without "MPI_": alltoall, allreduce,
// bcast, allgather, reduce_scatter_block.
#pragma once

#include <string>
#include <string_view>

#include "model/profile.hpp"

namespace loom::model {

// The calls loom-measure times (the others keep the built-in size rule).
inline constexpr const char* kCollCalls[] = {"alltoall", "allreduce", "bcast", "allgather",
                                             "reduce_scatter_block"};

// "MPI_Reduce_scatter_block" -> "reduce_scatter_block".
std::string coll_call_name(std::string_view mpi_name);
// coll_<engine>_<call>_np<ranks>.
std::string coll_term(std::string_view engine, std::string_view call, int ranks);

// From how many bytes a rank the node engine is predicted to beat the
// mirrors for `call` on `ranks` ranks: where the two measured curves last
// cross (interpolated in log bytes), 0 when the node engine wins at every
// measured size, +infinity when it loses at the largest. -1 when the
// profile lacks either curve.
double coll_node_from(const Profile& p, std::string_view call, int ranks);

}  // namespace loom::model
