#!/usr/bin/env python3
"""What the GPU's memory allows a 2D vector (8-byte blocks every 16 bytes,
issue 12's vector) against contiguous bytes of the same packed size, by
kernels that are not Loom's: PyTorch's strided copies (pack: strided to
contiguous; unpack: contiguous to strided; transfer: strided to strided, as
a zero-copy derived-type message moves it) and the copy engines' own 2D
copy (cudaMemcpy2DAsync through CuPy, strided to strided). Each is timed
alone by CUDA events, median of `iters`. Prints CSV:
op,bytes (packed),GB/s of packed data,ratio to the contiguous copy.

    python3 tools/peers/strided_transfer.py [--iters 50]
"""
import argparse

import torch

from cuda_events import kernel_timed  # tools/peers/, beside this script

try:
    import cupy
except ImportError:  # the 2D copy rows are left out
    cupy = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    print("op,bytes,GB/s,ratio to contiguous")
    for packed in (1 << 20, 16 << 20, 256 << 20):
        n = packed // 8
        a = torch.ones(2 * n, dtype=torch.float64, device="cuda")
        b = torch.zeros(2 * n, dtype=torch.float64, device="cuda")
        c = torch.zeros(n, dtype=torch.float64, device="cuda")
        sa, sb = a[::2], b[::2]  # 8 bytes every 16
        rows = [
            ("contiguous copy", lambda: c.copy_(a[:n])),
            ("pack (strided to contiguous)", lambda: c.copy_(sa)),
            ("unpack (contiguous to strided)", lambda: sb.copy_(c)),
            ("transfer (strided to strided)", lambda: sb.copy_(sa)),
        ]
        if cupy is not None:
            stream = torch.cuda.current_stream().cuda_stream  # the events' stream
            kind = cupy.cuda.runtime.memcpyDeviceToDevice

            def copy2d():
                cupy.cuda.runtime.memcpy2DAsync(b.data_ptr(), 16, a.data_ptr(), 16, 8, n, kind,
                                                stream)

            rows.append(("cudaMemcpy2D (strided to strided)", copy2d))
        base = None
        for name, fn in rows:
            gbs = packed / kernel_timed(fn, args.iters) / 1e9
            base = base or gbs
            print(f"{name},{packed},{gbs:.1f},{gbs / base:.3f}", flush=True)
        del a, b, c
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
