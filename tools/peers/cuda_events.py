"""Timing one GPU operation by CUDA events (the peers' scripts share it)."""
import statistics

import torch


def kernel_timed(fn, iters, warmup=5):
    """Median seconds of fn's GPU work, each call between two events of the
    current stream, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        z.record()
        z.synchronize()
        ts.append(a.elapsed_time(z) / 1e3)
    return statistics.median(ts)
