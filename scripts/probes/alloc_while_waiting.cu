// Which CUDA memory calls wait for the device: a kernel polls a word of
// mapped host memory that a watchdog thread sets after 2 s; each call's host
// time says whether it returned at once or only once the kernel could end.
// A thread that a stream waits for (Loom's stream progress thread) must not
// make the calls that wait (docs/results/cuda-frees-h200.md).
//   nvcc -O2 -arch=sm_90 -std=c++17 scripts/probes/alloc_while_waiting.cu -o alloc_while_waiting &&
//   ./alloc_while_waiting
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include <unistd.h>

__global__ void poll(const volatile unsigned* w) {
  while (*w == 0) __nanosleep(1000);
}

int main() {
  // Another process lends two allocations through CUDA IPC (before this
  // one touches CUDA: a forked child must not inherit a context).
  int to_parent[2], to_child[2];
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) return 1;
  if (fork() == 0) {
    cudaIpcMemHandle_t hs[2];
    for (auto& hh : hs) {
      void* p = nullptr;
      cudaMalloc(&p, 2 << 20);
      cudaIpcGetMemHandle(&hh, p);
    }
    if (write(to_parent[1], hs, sizeof(hs)) != sizeof(hs)) return 1;
    char c;
    if (read(to_child[0], &c, 1) != 1) return 1;  // until the parent is done
    return 0;
  }
  cudaIpcMemHandle_t lent[2];
  if (read(to_parent[0], lent, sizeof(lent)) != sizeof(lent)) return 1;
  void* mapped = nullptr;
  if (cudaIpcOpenMemHandle(&mapped, lent[0], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess)
    std::printf("cudaIpcOpenMemHandle failed\n");
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  unsigned* word = nullptr;
  cudaHostAlloc(&word, 64, cudaHostAllocMapped);
  unsigned* dword = nullptr;
  cudaHostGetDevicePointer(reinterpret_cast<void**>(&dword), word, 0);
  void* d = nullptr;
  void* h = nullptr;
  cudaMalloc(&d, 64 << 20);
  cudaHostAlloc(&h, 64 << 20, cudaHostAllocMapped);
  void* reg = std::malloc(1 << 20);  // registered, then unregistered while the kernel waits
  cudaHostRegister(reg, 1 << 20, cudaHostRegisterMapped);
  cudaEvent_t ev;
  cudaEventCreate(&ev);
  cudaStream_t other;
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  const std::pair<const char*, std::function<void()>> calls[] = {
      {"cudaMalloc 64 MiB",
       [] {
         void* p;
         cudaMalloc(&p, 64 << 20);
       }},
      {"cudaHostAlloc 64 MiB",
       [] {
         void* p;
         cudaHostAlloc(&p, 64 << 20, cudaHostAllocMapped);
       }},
      {"cudaFree", [&] { cudaFree(d); }},
      {"cudaFreeHost", [&] { cudaFreeHost(h); }},
      {"cudaHostUnregister", [&] { cudaHostUnregister(reg); }},
      {"cudaEventDestroy", [&] { cudaEventDestroy(ev); }},
      {"cudaStreamDestroy", [&] { cudaStreamDestroy(other); }},
      {"cudaIpcCloseMemHandle", [&] { cudaIpcCloseMemHandle(mapped); }},
      {"cudaIpcOpenMemHandle",
       [&] {
         void* p = nullptr;
         cudaIpcOpenMemHandle(&p, lent[1], cudaIpcMemLazyEnablePeerAccess);
       }},
  };
  for (const auto& [name, call] : calls) {
    *reinterpret_cast<volatile unsigned*>(word) = 0;
    poll<<<1, 1, 0, s>>>(dword);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the kernel runs
    std::atomic<bool> stop{false};
    std::thread dog([&] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!stop && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      *reinterpret_cast<volatile unsigned*>(word) = 1;
    });
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stop = true;
    dog.join();
    cudaStreamSynchronize(s);
    std::printf("%-22s while a kernel waits for the host: %8.1f ms (%s)\n", name, ms,
                ms > 1500 ? "waited for the kernel" : "returned at once");
  }
  if (write(to_child[1], "x", 1) != 1) return 1;
  return 0;
}
