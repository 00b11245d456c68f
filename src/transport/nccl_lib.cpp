#include "transport/nccl_lib.hpp"

#if defined(LOOM_HAVE_NCCL)
#include <dlfcn.h>

#include <type_traits>

namespace loom::transport {

const NcclApi& nccl_api() {
  static const NcclApi a = [] {
    NcclApi x;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      x.why = std::string("libnccl.so.2 not found: ") + dlerror();
      return x;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      ok = ok && fn;
    };
    get(x.get_unique_id, "ncclGetUniqueId");
    get(x.comm_init_rank, "ncclCommInitRank");
    get(x.comm_destroy, "ncclCommDestroy");
    get(x.error_string, "ncclGetErrorString");
    get(x.all_reduce, "ncclAllReduce");
    get(x.reduce, "ncclReduce");
    get(x.reduce_scatter, "ncclReduceScatter");
    get(x.broadcast, "ncclBroadcast");
    get(x.all_gather, "ncclAllGather");
    get(x.send, "ncclSend");
    get(x.recv, "ncclRecv");
    get(x.group_start, "ncclGroupStart");
    get(x.group_end, "ncclGroupEnd");
    if (!ok) x.why = "libnccl lacks an entry point Loom uses";
    return x;
  }();
  return a;
}

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return Status(Err::kCuda, std::string(what) + ": " + nccl_api().error_string(r));
}

}  // namespace loom::transport
#endif
