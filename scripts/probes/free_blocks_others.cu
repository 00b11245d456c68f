// Does a free that waits for the device hold up other threads' CUDA calls?
// A kernel polls a word of mapped host memory that a watchdog sets after 2 s;
// one thread calls cudaFreeHost (or cudaFree), which waits for the kernel
// (alloc_while_waiting.cu); 100 ms later a second thread times the calls
// Loom's stream progress thread makes. A call that takes ~1.9 s was held up
// by the free (docs/results/cuda-frees-h200.md).
//   nvcc -O2 -arch=sm_90 -lcuda scripts/probes/free_blocks_others.cu -o fbo && ./fbo
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

__global__ void poll(const volatile unsigned* w) {
  while (*w == 0) __nanosleep(1000);
}
__global__ void empty() {}

using Clock = std::chrono::steady_clock;
static double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int main() {
  cudaSetDevice(0);
  cudaStream_t s, other;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  unsigned* word = nullptr;
  cudaHostAlloc(&word, 64, cudaHostAllocMapped);
  unsigned* dword = nullptr;
  cudaHostGetDevicePointer(reinterpret_cast<void**>(&dword), word, 0);
  unsigned* flag = nullptr;  // what cuStreamWriteValue32 writes
  cudaHostAlloc(&flag, 64, cudaHostAllocMapped);
  void* dst = nullptr;
  cudaMalloc(&dst, 1 << 20);
  void* src = nullptr;
  cudaHostAlloc(&src, 1 << 20, cudaHostAllocDefault);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);

  // The calls the second thread makes while the free waits.
  const std::pair<const char*, std::function<void()>> calls[] = {
      {"cudaSetDevice", [] { cudaSetDevice(0); }},
      {"launch (other stream)", [&] { empty<<<1, 1, 0, other>>>(); }},
      {"cuStreamWriteValue32",
       [&] {
         cuStreamWriteValue32(reinterpret_cast<CUstream>(other),
                              reinterpret_cast<CUdeviceptr>(flag), 1, 0);
       }},
      {"cudaMemcpyAsync H2D 1 MiB",
       [&] { cudaMemcpyAsync(dst, src, 1 << 20, cudaMemcpyHostToDevice, other); }},
      {"cudaEventRecord", [&] { cudaEventRecord(ev, other); }},
      {"cudaStreamQuery", [&] { cudaStreamQuery(other); }},
      {"cudaMalloc 1 MiB",
       [] {
         void* p;
         cudaMalloc(&p, 1 << 20);
       }},
  };
  const char* frees[] = {"cudaFreeHost", "cudaFree"};
  for (const char* free_name : frees) {
    for (const auto& [name, call] : calls) {
      void* h = nullptr;
      void* d = nullptr;
      cudaHostAlloc(&h, 64 << 20, cudaHostAllocMapped);
      cudaMalloc(&d, 64 << 20);
      cudaStreamSynchronize(other);
      *reinterpret_cast<volatile unsigned*>(word) = 0;
      poll<<<1, 1, 0, s>>>(dword);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the kernel runs
      const auto t0 = Clock::now();
      std::atomic<bool> done{false};
      std::thread dog([&] {
        while (ms_since(t0) < 2000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        *reinterpret_cast<volatile unsigned*>(word) = 1;
      });
      double free_ms = 0;
      std::thread freer([&] {
        if (free_name[8] == 'H')
          cudaFreeHost(h);
        else
          cudaFree(d);
        free_ms = ms_since(t0);
        done = true;
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the free waits
      const bool free_waiting = !done;
      const auto t1 = Clock::now();
      call();
      const double call_ms = ms_since(t1);
      dog.join();
      freer.join();
      cudaDeviceSynchronize();
      if (free_name[8] == 'H')
        cudaFree(d);
      else
        cudaFreeHost(h);
      std::printf("%-13s (%s, %6.0f ms) | %-26s %8.2f ms (%s)\n", free_name,
                  free_waiting ? "waiting" : "had returned", free_ms, name, call_ms,
                  call_ms > 1000 ? "HELD UP by the free" : "went on");
    }
  }
  return 0;
}
