// The brk-heap fast path of buffer classification: only addresses in the
// process's brk heap take it (host memory for certain); mmap'd memory, the
// stack and null never do.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <thread>

#include "transport/memtype.hpp"

namespace loom::transport {
namespace {

TEST(Memtype, BrkHeapFastPathTakesOnlyHeapMemory) {
  void* small = std::malloc(64);  // glibc: the main arena, grown with brk
  ASSERT_NE(small, nullptr);
#ifndef __SANITIZE_ADDRESS__  // ASan's allocator maps its own memory: no brk heap, no fast path
  EXPECT_TRUE(in_brk_heap(small));
#endif
  EXPECT_EQ(memkind(small), MemKind::kHost);
  std::free(small);

  const size_t len = size_t{1} << 22;
  void* mapped = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  EXPECT_FALSE(in_brk_heap(mapped));
  munmap(mapped, len);

  int on_stack = 0;
  EXPECT_FALSE(in_brk_heap(&on_stack));
  EXPECT_FALSE(in_brk_heap(nullptr));
}

TEST(Memtype, StackFastPathTakesOnlyThisThreadsStack) {
  int on_stack = 0;
  EXPECT_TRUE(on_own_stack(&on_stack));
  EXPECT_FALSE(on_own_stack(nullptr));
  void* heap = std::malloc(64);
  EXPECT_FALSE(on_own_stack(heap));
  std::free(heap);
  // Another thread's stack is not this thread's.
  bool other_seen_as_mine = true;
  std::thread([&] {
    int theirs = 0;
    other_seen_as_mine = false;
    EXPECT_TRUE(on_own_stack(&theirs));
    EXPECT_FALSE(on_own_stack(&on_stack));
  }).join();
  EXPECT_FALSE(other_seen_as_mine);
}

}  // namespace
}  // namespace loom::transport
