// gpu_reduce against host_reduce, bit for bit, for every defined (operation,
// type) pair: counts 0, 1, 1000 and 2^20 + 3, 1, 2, 4 and 20 inputs, every
// pointer alignment path (shared 16-byte alignment, shifted by one element,
// different per input, not even element-aligned), outputs that are inputs,
// and padding bytes never written. The only allowed difference: a NaN that
// SUM or PROD produced may have another sign or payload (the GPU's are
// canonical). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "coll/reduce_gpu.hpp"
#include "coll/reduce_op.hpp"
#include "pack/gpu_engine.hpp"

namespace loom::coll {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!pack::gpu_available()) GTEST_SKIP() << "no usable CUDA device"

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr ReduceOp kOps[] = {
    ReduceOp::kSum,    ReduceOp::kProd,   ReduceOp::kMin,     ReduceOp::kMax, ReduceOp::kLand,
    ReduceOp::kLor,    ReduceOp::kLxor,   ReduceOp::kBand,    ReduceOp::kBor, ReduceOp::kBxor,
    ReduceOp::kMinloc, ReduceOp::kMaxloc, ReduceOp::kReplace, ReduceOp::kNoOp};

Basic basic_at(int i) {
  return static_cast<Basic>(i);
}

std::string name(ReduceOp op, Basic b) {
  return std::string(reduce_op_name(op)) + "/" + basic_name(b);
}

// Equal bytes, or (SUM and PROD of floating types) both NaN.
bool same_value(ReduceOp op, Basic b, const unsigned char* x, const unsigned char* y, size_t n) {
  if (std::memcmp(x, y, n) == 0) return true;
  if (op != ReduceOp::kSum && op != ReduceOp::kProd) return false;
  const bool f32 = b == Basic::kFloat || b == Basic::kCFloat;
  const bool f64 = b == Basic::kDouble || b == Basic::kCDouble;
  if (!f32 && !f64) return false;
  const size_t w = f32 ? 4 : 8;
  for (size_t i = 0; i < n; i += w) {
    if (std::memcmp(x + i, y + i, w) == 0) continue;
    double u, v;
    if (f32) {
      float a, c;
      std::memcpy(&a, x + i, 4);
      std::memcpy(&c, y + i, 4);
      u = a;
      v = c;
    } else {
      std::memcpy(&u, x + i, 8);
      std::memcpy(&v, y + i, 8);
    }
    if (!(std::isnan(u) && std::isnan(v))) return false;
  }
  return true;
}

// "" or where the outputs differ.
std::string compare(ReduceOp op, Basic b, const std::vector<unsigned char>& got,
                    const std::vector<unsigned char>& want, size_t first, size_t count) {
  const size_t es = basic_size(b);
  if (std::memcmp(got.data(), want.data(), first) != 0) return "bytes before out written";
  for (size_t i = 0; i < count; ++i)
    if (!same_value(op, b, got.data() + first + i * es, want.data() + first + i * es, es)) {
      char buf[160];
      int at = std::snprintf(buf, sizeof buf, "element %zu: gpu", i);
      for (size_t j = 0; j < es; ++j)
        at += std::snprintf(buf + at, sizeof buf - static_cast<size_t>(at), " %02x",
                            got[first + i * es + j]);
      at += std::snprintf(buf + at, sizeof buf - static_cast<size_t>(at), " host");
      for (size_t j = 0; j < es; ++j)
        at += std::snprintf(buf + at, sizeof buf - static_cast<size_t>(at), " %02x",
                            want[first + i * es + j]);
      return buf;
    }
  const size_t end = first + count * es;
  if (std::memcmp(got.data() + end, want.data() + end, got.size() - end) != 0)
    return "bytes after out written";
  return "";
}

constexpr int kMaxN = 20;
constexpr size_t kBig = (size_t{1} << 20) + 3;
constexpr size_t kSlack = 64;
constexpr size_t kBufBytes = kBig * 16 + kSlack;

// kMaxN random input buffers, on the host and the device, made once.
class ReduceGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!pack::gpu_available()) return;
    host_.assign(kMaxN, std::vector<unsigned char>(kBufBytes));
    std::mt19937_64 rng(20261123);
    for (auto& h : host_)
      for (size_t i = 0; i < kBufBytes; i += 8) {
        const uint64_t r = rng();
        std::memcpy(h.data() + i, &r, std::min<size_t>(8, kBufBytes - i));
      }
    dev_.assign(kMaxN, nullptr);
    for (int k = 0; k < kMaxN; ++k) {
      if (cudaMalloc(&dev_[static_cast<size_t>(k)], kBufBytes) != cudaSuccess) return;
      if (cudaMemcpy(dev_[static_cast<size_t>(k)], host_[static_cast<size_t>(k)].data(), kBufBytes,
                     cudaMemcpyHostToDevice) != cudaSuccess)
        return;
    }
    if (cudaMalloc(&dout_, kBufBytes + 2 * kSlack) != cudaSuccess) return;
    ready_ = true;
  }
  static void TearDownTestSuite() {
    for (void* p : dev_) (void)cudaFree(p);
    (void)cudaFree(dout_);
    dev_.clear();
    host_.clear();
  }

  // One case: input k at byte offset off[k] of buffer k, out at out_off.
  // Returns "" or what differed.
  static std::string run_case(ReduceOp op, Basic b, int n, size_t count,
                              const std::vector<size_t>& off, size_t out_off) {
    std::vector<const void*> hin, din;
    for (int k = 0; k < n; ++k) {
      const size_t o = off[static_cast<size_t>(k)];
      hin.push_back(host_[static_cast<size_t>(k)].data() + o);
      din.push_back(static_cast<const unsigned char*>(dev_[static_cast<size_t>(k)]) + o);
    }
    const size_t len = out_off + count * basic_size(b) + kSlack;
    std::vector<unsigned char> want(len, 0x5A), got(len);
    if (cudaMemset(dout_, 0x5A, len) != cudaSuccess) return "cudaMemset";
    const Status hs = host_reduce(op, b, hin.data(), n, want.data() + out_off, count);
    if (!hs) return "host_reduce: " + hs.message();
    const Status gs = gpu_reduce_sync(op, b, din.data(), n,
                                      static_cast<unsigned char*>(dout_) + out_off, count, nullptr);
    if (!gs) return "gpu_reduce: " + gs.message();
    if (cudaMemcpy(got.data(), dout_, len, cudaMemcpyDeviceToHost) != cudaSuccess)
      return "cudaMemcpy";
    return compare(op, b, got, want, out_off, count);
  }

  static bool ready_;
  static std::vector<std::vector<unsigned char>> host_;
  static std::vector<void*> dev_;
  static void* dout_;
};

bool ReduceGpu::ready_ = false;
std::vector<std::vector<unsigned char>> ReduceGpu::host_;
std::vector<void*> ReduceGpu::dev_;
void* ReduceGpu::dout_ = nullptr;

TEST_F(ReduceGpu, EveryDefinedPairMatchesHost) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(ready_);
  int cases = 0;
  for (ReduceOp op : kOps)
    for (int bi = 0; bi < kBasicCount; ++bi) {
      const Basic b = basic_at(bi);
      if (!reduce_defined(op, b)) continue;
      const size_t es = basic_size(b);
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, kBig})
        for (int n : {1, 2, 4, 20}) {
          // Aligned; every pointer one element on (a head before the vectors).
          for (size_t shift : {size_t{0}, es}) {
            const std::vector<size_t> off(kMaxN, shift);
            const std::string d = run_case(op, b, n, count, off, shift);
            ASSERT_EQ(d, "") << name(op, b) << " n=" << n << " count=" << count
                             << " shift=" << shift;
            ++cases;
          }
          if (count == kBig) continue;
          // Inputs k elements on (no shared 16-byte alignment: element loads),
          // then odd byte offsets (not even element-aligned: byte loads).
          std::vector<size_t> off(kMaxN), odd(kMaxN);
          for (int k = 0; k < kMaxN; ++k) {
            off[static_cast<size_t>(k)] = static_cast<size_t>(k) * es;
            odd[static_cast<size_t>(k)] = static_cast<size_t>(2 * k + 1);
          }
          ASSERT_EQ(run_case(op, b, n, count, off, es), "")
              << name(op, b) << " n=" << n << " count=" << count << " per-input shifts";
          ASSERT_EQ(run_case(op, b, n, count, odd, 3), "")
              << name(op, b) << " n=" << n << " count=" << count << " odd bytes";
          cases += 2;
        }
    }
  std::printf("[ReduceGpu] %d cases\n", cases);
}

// out is one of the inputs: in[0], in[n-1], and with 20 inputs in[17] (a
// later pass's input: the fold goes through a temporary).
TEST_F(ReduceGpu, InPlace) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(ready_);
  struct Case {
    ReduceOp op;
    Basic b;
  };
  for (Case c : {Case{ReduceOp::kSum, Basic::kFloat}, Case{ReduceOp::kMinloc, Basic::kDoubleInt},
                 Case{ReduceOp::kProd, Basic::kCDouble}, Case{ReduceOp::kBxor, Basic::kInt16},
                 Case{ReduceOp::kReplace, Basic::kShortInt}}) {
    for (size_t count : {size_t{1000}, kBig})
      for (int n : {4, 20})
        for (int at : {0, n - 1, 17}) {
          if (at >= n) continue;
          SCOPED_TRACE(name(c.op, c.b) + " n=" + std::to_string(n) + " out=in[" +
                       std::to_string(at) + "] count=" + std::to_string(count));
          const size_t bytes = count * basic_size(c.b);
          // The reference, out of place on the host.
          std::vector<const void*> hin, din;
          for (int k = 0; k < n; ++k) hin.push_back(host_[static_cast<size_t>(k)].data());
          std::vector<unsigned char> want(
              host_[static_cast<size_t>(at)].begin(),
              host_[static_cast<size_t>(at)].begin() + static_cast<std::ptrdiff_t>(bytes));
          ASSERT_TRUE(host_reduce(c.op, c.b, hin.data(), n, want.data(), count).is_ok());
          // On the GPU, into a copy of in[at] that stands in for it.
          void* copy = nullptr;
          CUDA_OK(cudaMalloc(&copy, bytes));
          CUDA_OK(cudaMemcpy(copy, dev_[static_cast<size_t>(at)], bytes, cudaMemcpyDeviceToDevice));
          for (int k = 0; k < n; ++k) din.push_back(k == at ? copy : dev_[static_cast<size_t>(k)]);
          const Status s = gpu_reduce_sync(c.op, c.b, din.data(), n, copy, count, nullptr);
          std::vector<unsigned char> got(bytes);
          CUDA_OK(cudaMemcpy(got.data(), copy, bytes, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaFree(copy));
          ASSERT_TRUE(s.is_ok()) << s.message();
          ASSERT_EQ(compare(c.op, c.b, got, want, 0, count), "");
        }
  }
}

TEST_F(ReduceGpu, BadArguments) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(ready_);
  const void* in[] = {dev_[0], nullptr};
  EXPECT_EQ(gpu_reduce(ReduceOp::kMin, Basic::kCFloat, in, 1, dout_, 1, nullptr).code(),
            Err::kUnsupported);
  EXPECT_EQ(gpu_reduce(ReduceOp::kSum, Basic::kFloat, in, 2, dout_, 1, nullptr).code(),
            Err::kInvalidArg);
  EXPECT_EQ(gpu_reduce(ReduceOp::kSum, Basic::kFloat, in, 0, dout_, 1, nullptr).code(),
            Err::kInvalidArg);
  EXPECT_TRUE(gpu_reduce(ReduceOp::kSum, Basic::kFloat, in, 1, nullptr, 0, nullptr).is_ok());
}

// Throughput of large folds (printed, not checked): bytes read and written
// over the kernel time.
TEST_F(ReduceGpu, Bandwidth) {
  SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr int kMax = 8;
  std::vector<void*> bufs(kMax + 1, nullptr);
  for (void*& p : bufs) {
    CUDA_OK(cudaMalloc(&p, kBytes));
    CUDA_OK(cudaMemset(p, 0, kBytes));
  }
  cudaEvent_t t0, t1;
  CUDA_OK(cudaEventCreate(&t0));
  CUDA_OK(cudaEventCreate(&t1));
  struct Case {
    ReduceOp op;
    Basic b;
  };
  for (Case c : {Case{ReduceOp::kSum, Basic::kFloat}, Case{ReduceOp::kSum, Basic::kDouble},
                 Case{ReduceOp::kMax, Basic::kInt8}, Case{ReduceOp::kProd, Basic::kCFloat},
                 Case{ReduceOp::kMinloc, Basic::kDoubleInt}}) {
    const size_t count = kBytes / basic_size(c.b);
    for (int n : {2, 4, 8}) {
      std::vector<const void*> in(bufs.begin(), bufs.begin() + n);
      ASSERT_TRUE(gpu_reduce_sync(c.op, c.b, in.data(), n, bufs[kMax], count, nullptr).is_ok());
      constexpr int kReps = 5;
      CUDA_OK(cudaEventRecord(t0));
      for (int r = 0; r < kReps; ++r)
        ASSERT_TRUE(gpu_reduce(c.op, c.b, in.data(), n, bufs[kMax], count, nullptr).is_ok());
      CUDA_OK(cudaEventRecord(t1));
      CUDA_OK(cudaEventSynchronize(t1));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
      const double gbs = double(n + 1) * double(kBytes) * kReps / (ms * 1e-3) / 1e9;
      std::printf("[ReduceGpu] %-14s n=%d  %7.1f GB/s (%.3f ms per fold of %zu MiB inputs)\n",
                  name(c.op, c.b).c_str(), n, gbs, ms / kReps, kBytes >> 20);
    }
  }
  CUDA_OK(cudaEventDestroy(t0));
  CUDA_OK(cudaEventDestroy(t1));
  for (void* p : bufs) CUDA_OK(cudaFree(p));
}

}  // namespace
}  // namespace loom::coll
