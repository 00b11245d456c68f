// gtest main for tests that need MPI: one rank, Loom initialised.
#include <gtest/gtest.h>
#include <mpi.h>

#include "loom/loom.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  loom_init();
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  loom_finalize();
  MPI_Finalize();
  return rc;
}
