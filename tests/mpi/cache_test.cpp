// The form cache: lifetime of entries, interning, and hash stability.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "loom/loom.h"
#include "mpi/runtime.hpp"
#include "pack/host_engine.hpp"
#include "type/canonical.hpp"

namespace loom::test {
namespace {

MPI_Datatype committed_vector(int n, int bl, int st, MPI_Datatype old) {
  MPI_Datatype t;
  MPI_Type_vector(n, bl, st, old, &t);
  MPI_Type_commit(&t);
  loom_type_commit(t);
  return t;
}

// MPI lets a type be freed while a message using it is in flight: the entry
// a user holds stays valid and packs correctly after the free.
TEST(Cache, EntryOutlivesTypeFree) {
  MPI_Datatype t = committed_vector(8, 2, 5, MPI_INT);
  auto e = runtime()->types.lookup(t);
  ASSERT_TRUE(e.is_ok());
  auto held = e.value();
  std::vector<int> src(64);
  for (int i = 0; i < 64; ++i) src[i] = i * 3;
  std::vector<char> expect(64 * 4);
  int pos = 0;
  PMPI_Pack(src.data(), 1, t, expect.data(), static_cast<int>(expect.size()), &pos, MPI_COMM_SELF);
  loom_type_free(t);
  MPI_Type_free(&t);
  auto l = pack::make_layout(type::repeat(held->info.form, 1, held->info.extent));
  ASSERT_TRUE(l.is_ok());
  std::vector<char> got(pos);
  pack::host_pack(*l, src.data(), got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), expect.begin()));
}

// After a free the MPI may hand out the same handle for a new type: the
// cache must describe the new one.
TEST(Cache, ReusedHandleGetsItsNewForm) {
  for (int i = 0; i < 20; ++i) {
    MPI_Datatype t = committed_vector(4, 1, 2 + i, MPI_INT);
    auto e = runtime()->types.lookup(t);
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ(e.value()->info.form->stride, 4 * (2 + i));
    loom_type_free(t);
    MPI_Type_free(&t);
  }
}

TEST(Cache, EqualFormsAreInterned) {
  MPI_Datatype a = committed_vector(16, 1, 4, MPI_DOUBLE);
  MPI_Datatype hv;
  MPI_Type_create_hvector(16, 1, 32, MPI_DOUBLE, &hv);
  MPI_Type_commit(&hv);
  loom_type_commit(hv);
  auto ea = runtime()->types.lookup(a), eb = runtime()->types.lookup(hv);
  ASSERT_TRUE(ea.is_ok() && eb.is_ok());
  EXPECT_EQ(ea.value()->info.form.get(), eb.value()->info.form.get());
  for (MPI_Datatype* t : {&a, &hv}) {
    loom_type_free(*t);
    MPI_Type_free(t);
  }
}

TEST(Cache, ConcurrentLookupsSeeOneEntry) {
  MPI_Datatype t = committed_vector(8, 3, 4, MPI_FLOAT);
  auto first = runtime()->types.lookup(t);
  ASSERT_TRUE(first.is_ok());
  std::vector<std::thread> threads;
  std::atomic<int> same{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 10000; ++k) {
        auto e = runtime()->types.lookup(t);
        if (e.is_ok() && e.value() == first.value()) ++same;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(same.load(), 40000);
  loom_type_free(t);
  MPI_Type_free(&t);
}

// Form hashes depend on the layout alone: the same values in every run and
// in the Open MPI and MPICH builds (both run this test against these constants).
TEST(Cache, HashesAreStableAcrossRunsAndMpis) {
  struct Golden {
    const char* name;
    MPI_Datatype t;
    const char* form;
    uint64_t hash;
  };
  int bl[6] = {2, 2, 2, 2, 3, 4}, dp[6] = {1, 10, 18, 26, 40, 56};
  MPI_Datatype hand, face, column;
  MPI_Type_indexed(6, bl, dp, MPI_FLOAT, &hand);
  int sz[3] = {32, 32, 32}, sub[3] = {32, 32, 1}, st[3] = {0, 0, 31};
  MPI_Type_create_subarray(3, sz, sub, st, MPI_ORDER_C, MPI_DOUBLE, &face);
  MPI_Type_vector(1024, 1, 1024, MPI_FLOAT, &column);
  std::vector<Golden> cases = {
      {"int", MPI_INT, "D4", 0x77543d17d76ad574ull},
      {"HAND indexed", hand, "L[D8,S(3,32){D8}@36,D12@156,D16@220]@4", 0x87027b6086768c7bull},
      {"3D x face", face, "S(1024,256){D8}@248", 0x375ce43e7abeac2aull},
      {"matrix column", column, "S(1024,4096){D4}", 0xce00f73377c690f3ull},
  };
  for (auto& g : cases) {
    if (g.t != MPI_INT) {
      MPI_Type_commit(&g.t);
      loom_type_commit(g.t);
    }
    auto e = runtime()->types.lookup(g.t);
    ASSERT_TRUE(e.is_ok()) << g.name;
    EXPECT_EQ(type::to_string(e.value()->info.form), g.form) << g.name;
    EXPECT_EQ(e.value()->info.hash(), g.hash)
        << g.name << std::hex << " hash 0x" << e.value()->info.hash();
    if (g.t != MPI_INT) {
      loom_type_free(g.t);
      MPI_Type_free(&g.t);
    }
  }
}

}  // namespace
}  // namespace loom::test
