/* Linked against Loom (find_package or pkg-config): Loom's API is callable
 * and Loom is active under MPI_Init; a strided message between two ranks
 * arrives as the MPI lays it out. */
#include <loom/loom.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int failed = size != 2;
  MPI_Datatype vec;
  MPI_Type_vector(3, 2, 4, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  char text[4096];
  if (loom_type_describe(vec, text, sizeof text) != MPI_SUCCESS || strlen(text) == 0) failed = 1;
  if (MPIX_Query_cuda_support() != 1) failed = 1; /* 1 while Loom is active */
  int data[12];
  for (int i = 0; i < 12; ++i) data[i] = rank == 0 ? 100 + i : -1;
  if (rank == 0 && size == 2) {
    MPI_Send(data, 1, vec, 1, 7, MPI_COMM_WORLD);
  } else if (rank == 1) {
    int got[6];
    MPI_Recv(got, 6, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const int want[6] = {100, 101, 104, 105, 108, 109};
    for (int i = 0; i < 6; ++i) failed |= got[i] != want[i];
  }
  MPI_Type_free(&vec);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf(any ? "linked: FAILED\n" : "linked: ok\n");
  MPI_Finalize();
  return any;
}
