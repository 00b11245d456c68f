"""mpi4py with CuPy arrays through Loom (LD_PRELOAD), on 2 ranks.

mpi4py hands the MPI the device pointer of a CuPy array; Loom moves it over
an MPI that cannot read GPU memory. Exits 77 (skipped) without CuPy, mpi4py
or a GPU.
"""
import sys

try:
    import cupy as cp
    from mpi4py import MPI
    if cp.cuda.runtime.getDeviceCount() == 0:
        raise RuntimeError("no GPU")
except Exception as e:  # noqa: BLE001 - any import or driver failure means skip
    print(f"skipped: {e}")
    sys.exit(77)

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
if size < 2:
    print("skipped: needs 2 ranks")
    sys.exit(77)
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
peer = rank ^ 1

# Contiguous device arrays, both directions.
n = 1 << 20
mine = cp.arange(n, dtype=cp.float64) * (rank + 1)
got = cp.zeros(n, dtype=cp.float64)
comm.Sendrecv(mine, dest=peer, sendtag=1, recvbuf=got, source=peer, recvtag=1)
assert bool((got == cp.arange(n, dtype=cp.float64) * (peer + 1)).all()), "contiguous"

# A derived type on device memory: every third float of a 3000-float array.
vec = MPI.FLOAT.Create_vector(1000, 1, 3).Commit()
src = cp.arange(3000, dtype=cp.float32) + 10 * rank
dst = cp.full(3000, -1.0, dtype=cp.float32)
req = comm.Irecv([dst, 1, vec], source=peer, tag=2)
comm.Send([src, 1, vec], dest=peer, tag=2)
req.Wait()
expect = cp.full(3000, -1.0, dtype=cp.float32)
expect[::3] = (cp.arange(3000, dtype=cp.float32) + 10 * peer)[::3]
assert bool((dst == expect).all()), "vector type"
vec.Free()

comm.Barrier()
if rank == 0:
    print("mpi4py + CuPy through Loom: ok")
