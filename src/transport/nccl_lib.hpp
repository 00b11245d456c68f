// libnccl, opened at run time (never linked): Loom loads and runs where
// NCCL is absent, and what needs it is then simply off (`why` says so).
// Shared by the NCCL collective engine and the NCCL channel of the device
// method. Only a build that found nccl.h has it (LOOM_HAVE_NCCL).
#pragma once

#if defined(LOOM_HAVE_NCCL)
#include <nccl.h>  // types and prototypes only

#include <string>

#include "util/status.hpp"

namespace loom::transport {

// The entry points Loom uses, looked up in libnccl.so.2 once.
struct NcclApi {
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclReduce) reduce = nullptr;
  decltype(&::ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  std::string why;  // empty when loaded
};
const NcclApi& nccl_api();

// A Status for an NCCL result (`what`: the call).
Status nccl_status(ncclResult_t r, const char* what);

}  // namespace loom::transport
#endif
