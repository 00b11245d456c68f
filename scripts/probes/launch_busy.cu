// Host time of a kernel launch by the size of its parameters, with kernels
// that take spin_us on the GPU, synchronising every `every` launches; run one
// copy, or two at once under MPS (docs/results/halo-h200-hostpath.md).
//   nvcc -O2 -arch=sm_90 -std=c++17 scripts/probes/launch_busy.cu -o launch_busy
//   ./launch_busy [spin_us] [every]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
template <int B>
struct P {
  char b[B];
};
template <int B>
__global__ void k(const __grid_constant__ P<B> p, long long spin_ns) {
  long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > spin_ns) break;
  }
  if (threadIdx.x == 0 && p.b[0] == 7 && blockIdx.x == 12345) printf("x");
}
template <int B>
void run(cudaStream_t s, int spin_us, int every) {
  P<B> p{};
  std::vector<double> t;
  for (int i = 0; i < 3000; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    k<B><<<dim3(8, 16), 256, 0, s>>>(p, spin_us * 1000ll);
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (i % every == every - 1) cudaStreamSynchronize(s);
  }
  std::sort(t.begin(), t.end());
  std::printf("spin %3d us, sync every %2d, param %6d B: launch %.2f us median, %.2f p90\n",
              spin_us, every, B, t[t.size() / 2], t[t.size() * 9 / 10]);
}
int main(int argc, char** argv) {
  int spin = argc > 1 ? atoi(argv[1]) : 0, every = argc > 2 ? atoi(argv[2]) : 2;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  run<64>(s, spin, every);
  run<4000>(s, spin, every);
  run<20000>(s, spin, every);
  run<32000>(s, spin, every);
  run<64>(s, spin, every);
  run<20000>(s, spin, every);
  return 0;
}
