/* An MPI program that knows nothing of Loom: under loomrun, Loom is in every
 * rank (preloaded, active after MPI_Init) and the LOOM_* settings reach it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Loom's definition wins over the MPI's (or the MPI has none). */
  int (*query)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support");
  const int loaded = dlsym(RTLD_DEFAULT, "loom_type_describe") != NULL;
  const int active = query != NULL && query() == 1;
  const char* want = argc > 1 ? argv[1] : "";
  const char* got = getenv("LOOM_LOG_SUBSYS");
  int failed = !loaded || !active || strcmp(got ? got : "", want) != 0;
  if (failed)
    fprintf(stderr, "plain rank %d: loom %s, %s, LOOM_LOG_SUBSYS='%s' (want '%s')\n", rank,
            loaded ? "loaded" : "NOT loaded", active ? "active" : "NOT active", got ? got : "",
            want);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf(any ? "plain: FAILED on %d ranks\n" : "plain: ok on %d ranks\n", size);
  MPI_Finalize();
  return any;
}
