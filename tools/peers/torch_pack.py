#!/usr/bin/env python3
"""PyTorch's strided copies on TEMPI's MPI_Pack shapes, as the baseline the
device MPI_Pack target names: a 2D object of `target` bytes in blocks of B
bytes every 512 bytes, packed by `.contiguous()` of a strided uint8 view
(and unpacked by a copy into that view), each call synchronised, as TEMPI's
bench-mpi-pack times MPI_Pack, and the kernel alone by CUDA events (what
loom-bench-gpu's "tempi" rows time). Prints CSV:
op,target,block,GB/s,kernel GB/s (medians).

    python3 tools/peers/torch_pack.py [--iters 200]
"""
import argparse
import statistics
import time

import torch

from cuda_events import kernel_timed  # tools/peers/, beside this script


def timed(fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    stride = 512
    print("op,target,block,GB/s,kernel GB/s")
    for target in (1 << 20, 4 << 20):
        for block in (1, 2, 4, 8, 32, 64, 128, 256):
            n = target // block
            src = torch.empty(n * stride, dtype=torch.uint8, device="cuda")
            view = src.as_strided((n, block), (stride, 1))
            packed = torch.empty((n, block), dtype=torch.uint8, device="cuda")
            t_pack = timed(lambda: view.contiguous(), args.iters)
            t_unpack = timed(lambda: view.copy_(packed), args.iters)
            k_pack = kernel_timed(lambda: view.contiguous(), args.iters)
            k_unpack = kernel_timed(lambda: view.copy_(packed), args.iters)
            print(f"pack,{target},{block},{target / t_pack / 1e9:.3f},{target / k_pack / 1e9:.3f}")
            print(f"unpack,{target},{block},{target / t_unpack / 1e9:.3f},"
                  f"{target / k_unpack / 1e9:.3f}")
            del src, view, packed


if __name__ == "__main__":
    main()
