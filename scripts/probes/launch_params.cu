// Host time of one kernel launch by the size of its parameters (median and
// 90th percentile of 2000 launches, 128 CTAs of an empty kernel), the cost
// behind the batch launches' parameter size (docs/results/halo-h200-loom4d.md).
//   nvcc -O2 -arch=sm_90 -std=c++17 scripts/probes/launch_params.cu -o launch_params &&
//   ./launch_params
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
template <int B>
struct P {
  char b[B];
};
template <int B>
__global__ void k(const __grid_constant__ P<B> p) {
  if (threadIdx.x == 0 && p.b[0] == 7 && blockIdx.x == 12345) printf("x");
}
template <int B>
void run(cudaStream_t s) {
  P<B> p{};
  std::vector<double> t;
  for (int i = 0; i < 2000; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    k<B><<<dim3(8, 16), 256, 0, s>>>(p);
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (i % 20 == 19) cudaStreamSynchronize(s);
  }
  std::sort(t.begin(), t.end());
  std::printf("param %6d B: launch %.2f us median, %.2f p90\n", B, t[t.size() / 2],
              t[t.size() * 9 / 10]);
}
int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  run<64>(s);
  run<256>(s);
  run<1024>(s);
  run<4000>(s);
  run<8000>(s);
  run<16000>(s);
  run<32000>(s);
  run<64>(s);
  run<32000>(s);
  return 0;
}
