"""Loom under mpi4py with CuPy arrays on the GPU.

    loomrun mpirun -np 2 python3 examples/python/allreduce_cupy.py

mpi4py hands the MPI the device pointer of each CuPy array; Loom moves the
data even where the MPI cannot read GPU memory. Three things a GPU code
does, each checked against the answer computed on the GPU:

  1. a contiguous array around a ring of ranks (Sendrecv);
  2. a strided column of a row-major matrix, as a derived datatype
     (MPI.DOUBLE.Create_vector), into another column of the neighbour's;
  3. Allreduce of device arrays (sum, and max in place).

Prints one line per check on rank 0 and exits 0 when all hold, 1 when one
does not; 77 (skipped) without CuPy, mpi4py, a GPU or a second rank.
"""
import sys

try:
    import cupy as cp
    from mpi4py import MPI

    if cp.cuda.runtime.getDeviceCount() == 0:
        raise RuntimeError("no GPU")
except Exception as e:  # noqa: BLE001 - any import or driver failure means skip
    print(f"allreduce_cupy: skipped: {e}")
    sys.exit(77)

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
if size < 2:
    print("allreduce_cupy: skipped: needs at least 2 ranks")
    sys.exit(77)


# An exception on one rank must not leave the others waiting in a call.
def abort_on_error(kind, value, tb):
    sys.__excepthook__(kind, value, tb)
    comm.Abort(1)


sys.excepthook = abort_on_error

# One GPU per rank where there are enough, else ranks share (under MPS).
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
right, left = (rank + 1) % size, (rank - 1) % size
failures = []


def check(name, ok):
    ok = comm.allreduce(bool(ok), op=MPI.LAND)  # host objects: every rank's verdict
    if not ok:
        failures.append(name)
    if rank == 0:
        print(f"allreduce_cupy: {name}: {'ok' if ok else 'MISMATCH'}")


def sync():
    # The MPI cannot see CuPy's stream: data a kernel writes must be there
    # before a send reads it (the same holds under a CUDA-aware MPI).
    cp.cuda.get_current_stream().synchronize()


# 1. Contiguous: 1 Mi doubles to the right, from the left.
n = 1 << 20
mine = cp.arange(n, dtype=cp.float64) + 1e7 * rank
got = cp.full(n, -1.0, dtype=cp.float64)
sync()
comm.Sendrecv(mine, dest=right, sendtag=1, recvbuf=got, source=left, recvtag=1)
check("contiguous Sendrecv, 8 MiB", (got == cp.arange(n, dtype=cp.float64) + 1e7 * left).all())

# 2. A column of a rows x cols row-major matrix: `rows` doubles, `cols`
#    apart. Column 1 (the first interior one) goes to the right
#    neighbour's column cols-1 (its halo), as in a stencil code.
rows, cols = 1000, 64
a = cp.arange(rows * cols, dtype=cp.float64).reshape(rows, cols) + 1e7 * rank
halo = cp.full((rows, cols), -1.0, dtype=cp.float64)
column = MPI.DOUBLE.Create_vector(rows, 1, cols).Commit()
flat_a, flat_h = a.ravel(), halo.ravel()  # contiguous views; [j:] starts at column j
sync()
req = comm.Irecv([flat_h[cols - 1:], 1, column], source=left, tag=2)
comm.Send([flat_a[1:], 1, column], dest=right, tag=2)
req.Wait()
want = cp.full((rows, cols), -1.0, dtype=cp.float64)
want[:, cols - 1] = (cp.arange(rows * cols, dtype=cp.float64).reshape(rows, cols) + 1e7 * left)[:, 1]
check("strided column (MPI.DOUBLE.Create_vector), gaps untouched", (halo == want).all())
column.Free()

# 3. Allreduce on device arrays: a sum into another array, a max in place.
x = cp.arange(n, dtype=cp.float64) * (rank + 1)
total = cp.zeros(n, dtype=cp.float64)
sync()
comm.Allreduce(x, total, op=MPI.SUM)
check("Allreduce sum, 8 MiB", (total == cp.arange(n, dtype=cp.float64) * (size * (size + 1) // 2)).all())
y = cp.full(4096, float(rank), dtype=cp.float64)
y[rank] = 1e9
sync()
comm.Allreduce(MPI.IN_PLACE, y, op=MPI.MAX)
expect = cp.full(4096, float(size - 1), dtype=cp.float64)
expect[:size] = 1e9
check("Allreduce max in place", (y == expect).all())

sys.exit(1 if failures else 0)
