"""Loom under mpi4py with PyTorch tensors on the GPU: a halo exchange.

    loomrun mpirun -np 2 python3 examples/python/halo_torch.py

The ranks form a periodic ring along x. Each holds a (ny + 2) x (nx + 2)
row-major tile of float64 on its GPU with a halo of one cell; its first and
last interior columns go to its neighbours' halo columns as one message
each, a derived datatype over the tile itself (MPI.DOUBLE.Create_vector:
ny doubles, a row apart), so nothing is packed by hand. Then a contiguous
tensor around the ring and an Allreduce of device tensors (the global sum
and maximum of the interiors), as a solver's residual check does. Every
result is checked against the answer computed on the GPU.

Prints one line per check on rank 0 and exits 0 when all hold, 1 when one
does not; 77 (skipped) without PyTorch with CUDA, mpi4py or a second rank.
"""
import sys

try:
    import torch
    from mpi4py import MPI

    if not torch.cuda.is_available():
        raise RuntimeError("no GPU for PyTorch")
except Exception as e:  # noqa: BLE001 - any import or driver failure means skip
    print(f"halo_torch: skipped: {e}")
    sys.exit(77)

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
if size < 2:
    print("halo_torch: skipped: needs at least 2 ranks")
    sys.exit(77)


# An exception on one rank must not leave the others waiting in a call.
def abort_on_error(kind, value, tb):
    sys.__excepthook__(kind, value, tb)
    comm.Abort(1)


sys.excepthook = abort_on_error

torch.cuda.set_device(rank % torch.cuda.device_count())
dev = torch.device("cuda", torch.cuda.current_device())
right, left = (rank + 1) % size, (rank - 1) % size
failures = []


def check(name, ok):
    ok = comm.allreduce(bool(ok), op=MPI.LAND)  # host objects: every rank's verdict
    if not ok:
        failures.append(name)
    if rank == 0:
        print(f"halo_torch: {name}: {'ok' if ok else 'MISMATCH'}")


def interior(r, ny, nx):
    """Rank r's interior cells: distinct values everywhere (r, row, column)."""
    i = torch.arange(ny, dtype=torch.float64, device=dev).reshape(ny, 1)
    j = torch.arange(nx, dtype=torch.float64, device=dev).reshape(1, nx)
    return 1e6 * r + 1e3 * i + j


ny, nx = 512, 256
w = nx + 2  # a row of the tile, halo included
tile = torch.full((ny + 2, w), -1.0, dtype=torch.float64, device=dev)
tile[1:-1, 1:-1] = interior(rank, ny, nx)
flat = tile.reshape(-1)  # a view of the same memory; flat[k:] starts at element k
column = MPI.DOUBLE.Create_vector(ny, 1, w).Commit()  # one column of interior rows


def at(row, col):
    return flat[row * w + col:]


# The MPI cannot see PyTorch's stream: the tile must be written before a
# send reads it (the same holds under a CUDA-aware MPI).
torch.cuda.synchronize()
reqs = [comm.Irecv([at(1, 0), 1, column], source=left, tag=1),        # west halo
        comm.Irecv([at(1, nx + 1), 1, column], source=right, tag=2)]  # east halo
comm.Send([at(1, nx), 1, column], dest=right, tag=1)  # last interior column
comm.Send([at(1, 1), 1, column], dest=left, tag=2)    # first interior column
MPI.Request.Waitall(reqs)

want = torch.full((ny + 2, w), -1.0, dtype=torch.float64, device=dev)
want[1:-1, 1:-1] = interior(rank, ny, nx)
want[1:-1, 0] = interior(left, ny, nx)[:, nx - 1]
want[1:-1, nx + 1] = interior(right, ny, nx)[:, 0]
check("halo columns (MPI.DOUBLE.Create_vector on the tile), corners untouched",
      bool((tile == want).all().item()))
column.Free()

# Contiguous: a float32 tensor of 4 Mi elements to the right, from the left.
n = 4 << 20
mine = torch.arange(n, dtype=torch.float32, device=dev) + rank
got = torch.zeros(n, dtype=torch.float32, device=dev)
torch.cuda.synchronize()
comm.Sendrecv(mine, dest=right, sendtag=3, recvbuf=got, source=left, recvtag=3)
check("contiguous float32 Sendrecv, 16 MiB",
      bool((got == torch.arange(n, dtype=torch.float32, device=dev) + left).all().item()))

# Allreduce of device tensors: the interiors' sum and maximum.
part = torch.stack([tile[1:-1, 1:-1].sum(), tile[1:-1, 1:-1].max()])
total = torch.zeros(1, dtype=torch.float64, device=dev)
top = part[1:].clone()
torch.cuda.synchronize()
comm.Allreduce(part[:1].clone(), total, op=MPI.SUM)
comm.Allreduce(MPI.IN_PLACE, top, op=MPI.MAX)
want_sum = sum(interior(r, ny, nx).sum() for r in range(size))
want_max = interior(size - 1, ny, nx).max()
check("Allreduce sum and max of device tensors",
      bool(torch.isclose(total[0], want_sum, rtol=1e-12).item()) and bool((top[0] == want_max).item()))

sys.exit(1 if failures else 0)
