// The brk-heap fast path of buffer classification: only addresses in the
// process's brk heap take it (host memory for certain); mmap'd memory, the
// stack and null never do.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "transport/memtype.hpp"
#include "transport/range_cache.hpp"

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

TEST(Memtype, RangeCacheFindsInsertsReplacesAndErases) {
  RangeCache c;
  RangeCache::Hit h;
  EXPECT_FALSE(c.find(reinterpret_cast<void*>(0x1000), &h));
  c.insert(0x10000, 0x1000, 7);
  ASSERT_TRUE(c.find(reinterpret_cast<void*>(0x10000), &h));
  EXPECT_EQ(h.base, 0x10000u);
  EXPECT_EQ(h.size, 0x1000u);
  EXPECT_EQ(h.id, 7u);
  EXPECT_TRUE(c.find(reinterpret_cast<void*>(0x10fff), &h));
  EXPECT_FALSE(c.find(reinterpret_cast<void*>(0x11000), &h));  // one past the end
  EXPECT_FALSE(c.find(reinterpret_cast<void*>(0xffff), &h));
  // Freed and allocated again over part of it: the new allocation replaces it.
  c.insert(0x10800, 0x2000, 9);
  EXPECT_EQ(c.size(), 1);
  EXPECT_FALSE(c.find(reinterpret_cast<void*>(0x10000), &h));
  ASSERT_TRUE(c.find(reinterpret_cast<void*>(0x12000), &h));
  EXPECT_EQ(h.id, 9u);
  c.insert(0x20000, 0x100, 10);
  c.erase(0x12000, 1);
  EXPECT_FALSE(c.find(reinterpret_cast<void*>(0x10800), &h));
  EXPECT_TRUE(c.find(reinterpret_cast<void*>(0x20000), &h));
  // Full: old entries give way round robin, every new one is found.
  for (uintptr_t i = 0; i < 3 * RangeCache::kSlots; ++i) {
    c.insert(0x100000 + i * 0x100, 0x100, 100 + i);
    ASSERT_TRUE(c.find(reinterpret_cast<void*>(0x100000 + i * 0x100 + 5), &h));
    EXPECT_EQ(h.id, 100 + i);
  }
  EXPECT_EQ(c.size(), RangeCache::kSlots);
  c.clear();
  EXPECT_EQ(c.size(), 0);
}

// Readers racing a writer see whole entries only (id encodes base and size).
TEST(Memtype, RangeCacheReadersSeeWholeEntries) {
  RangeCache c;
  std::atomic<bool> stop{false};
  std::atomic<long> torn{0}, hits{0};
  const uintptr_t stable = 0x1000000 + 250 * 0x1000;  // never touched by the writer
  c.insert(stable, 0x1000, stable ^ 0x1000);
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&] {
      RangeCache::Hit h;
      while (!stop.load()) {
        for (uintptr_t k = 0; k < 256; ++k) {
          if (!c.find(reinterpret_cast<void*>(0x1000000 + k * 0x1000 + 16), &h)) continue;
          ++hits;
          if (h.id != (h.base ^ h.size)) ++torn;
        }
      }
    });
  // At least 2000 updates, and on until the readers have looked often (a
  // loaded machine may not run them before the writer is done).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int round = 0;
       round < 2000 || (hits.load() < 10000 && std::chrono::steady_clock::now() < until); ++round) {
    const uintptr_t k = static_cast<uintptr_t>(round * 37 % 200);
    const uintptr_t base = 0x1000000 + k * 0x1000;
    const size_t size = 0x800 + static_cast<size_t>(round % 5) * 0x100;
    if (round % 7 == 0)
      c.erase(base, 1);
    else
      c.insert(base, size, base ^ size);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(hits.load(), 0);
}

}  // namespace
}  // namespace loom::transport
