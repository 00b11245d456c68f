// MPI_THREAD_MULTIPLE: several threads per rank run their own exchanges
// (own tags) at once through the interposer; every message must arrive
// whole and in order. Run on 2 ranks, with host buffers and in the
// host-as-device mode (request table, staging and registry under contention).
#include <gtest/gtest.h>
#include <mpi.h>

#include <thread>
#include <vector>

#include "loom/loom.h"
#include "mpi/runtime.hpp"

namespace {

int g_provided = MPI_THREAD_SINGLE;

TEST(Threads, ConcurrentExchangesKeepEveryMessage) {
  if (g_provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "the MPI gives no MPI_THREAD_MULTIPLE";
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  const int peer = rank ^ 1;
  if (peer >= size) return;
  MPI_Datatype t;
  MPI_Type_vector(32, 2, 3, MPI_INT, &t);
  MPI_Type_commit(&t);
  const int kThreads = 4, kMessages = 200, kInts = 32 * 3;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int m = 0; m < kMessages; ++m) {
        std::vector<int> out(kInts), in(kInts, -1);
        for (int i = 0; i < kInts; ++i) out[i] = (rank * 1000 + th) * 100000 + m * 100 + i;
        MPI_Request r[2];
        MPI_Irecv(in.data(), 1, t, peer, th, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(out.data(), 1, t, peer, th, MPI_COMM_WORLD, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        for (int i = 0; i < kInts; ++i) {
          const bool data = i % 3 != 2;  // the vector's gaps stay -1
          const int want = data ? (peer * 1000 + th) * 100000 + m * 100 + i : -1;
          if (in[i] != want) ++bad[th];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int th = 0; th < kThreads; ++th) EXPECT_EQ(bad[th], 0) << "thread " << th;
  MPI_Type_free(&t);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(loom::runtime()->bytes_in_use(), 0u);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &g_provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
