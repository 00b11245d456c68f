// Collectives through the interposer on 2 to 4 ranks, run by ctest in three
// modes: host buffers (plain pass-through), LOOM_TEST_HOST_AS_DEVICE=1
// (every buffer takes the device path, moved by the host engine, so CI
// covers it without a GPU) and the same with LOOM_METHOD=device (the
// node-local engine). "Host" buffers of a case are marked host memory with
// test_mark_host, so host/device mixes are tested too. The test bodies are
// in coll_cases.hpp, shared with the GPU suite.
#include <cstdlib>
#include <cstring>

#include "transport/memtype.hpp"

#include "coll_cases.hpp"

namespace loom::test::coll {
namespace {

class HostAsDevice final : public Backend {
 public:
  bool usable(std::string*) override { return true; }
  void* alloc(size_t bytes, bool device) override {
    void* p = std::calloc(bytes, 1);
    if (!device) loom::transport::test_mark_host(p, bytes);
    return p;
  }
  void release(void* p, bool device) override {
    if (!device) loom::transport::test_mark_host(p, 0);
    std::free(p);
  }
  void put(void* dst, const void* src, size_t n, bool) override { std::memcpy(dst, src, n); }
  void get(void* dst, const void* src, size_t n, bool) override { std::memcpy(dst, src, n); }
  bool device_path() override {
    const char* m = std::getenv("LOOM_TEST_HOST_AS_DEVICE");
    return m && std::string(m) == "1";
  }
};

}  // namespace

Backend& backend() {
  static HostAsDevice b;
  return b;
}

}  // namespace loom::test::coll
