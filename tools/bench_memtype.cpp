#include "bench_memtype.hpp"

#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "transport/memtype.hpp"
#include "util/knobs.hpp"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loom::tools {
namespace {

// Nanoseconds a call of memkind(p), and what it said.
double ns_per_call(const void* p, int reps, transport::MemKind* kind) {
  auto t = std::chrono::steady_clock::now();
  transport::MemKind k = transport::MemKind::kHost;
  for (int i = 0; i < reps; ++i) k = transport::memkind(static_cast<const char*>(p) + (i & 63));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  *kind = k;
  return s * 1e9 / reps;
}

}  // namespace

int bench_memtype(bool quick) {
  const int reps = quick ? 20000 : 1000000;
  struct Case {
    std::string name;
    void* p;
  };
  std::vector<Case> cases;
  char on_stack[256];
  void* small = std::malloc(256);  // the brk heap
  const size_t big = size_t{64} << 20;
  void* mapped =
      mmap(nullptr, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // mmap'd
  void* other = nullptr;  // another thread's arena
  std::thread([&] { other = std::malloc(256); }).join();
  cases.push_back({"stack", on_stack});
  cases.push_back({"brk heap (malloc 256 B)", small});
  cases.push_back({"mmap'd host (64 MiB)", mapped});
  cases.push_back({"another thread's malloc arena", other});
#ifdef LOOM_HAVE_CUDA
  void *pinned = nullptr, *dev = nullptr;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
    cudaMallocHost(&pinned, 4096);
    cudaMalloc(&dev, size_t{1} << 20);
    if (pinned) cases.push_back({"pinned host (cudaMallocHost)", pinned});
    if (dev) cases.push_back({"device (cudaMalloc)", dev});
  }
#endif
  cli::table(
      "# loom-bench memtype: ns a classification (transport::memkind), %d calls a row; "
      "LOOM_MEMTYPE_CACHE=%s\n\n| memory | says | ns a call |\n|---|---|---:|\n",
      reps, knobs().memtype_cache.c_str());
  for (const Case& c : cases) {
    transport::MemKind k;
    ns_per_call(c.p, reps / 10, &k);  // warm: the first device lookup fills the cache
    const double ns = ns_per_call(c.p, reps, &k);
    cli::table("| %s | %s | %.1f |\n", c.name.c_str(),
               k == transport::MemKind::kDevice ? "device" : "host", ns);
  }
  std::free(small);
  std::free(other);
  munmap(mapped, big);
#ifdef LOOM_HAVE_CUDA
  if (pinned) cudaFreeHost(pinned);
  if (dev) cudaFree(dev);
#endif
  return 0;
}

}  // namespace loom::tools
