#!/usr/bin/env python3
"""Markdown tables from loom-p2p rows (scripts/bench_p2p.sh writes them).

    python3 tools/p2p_table.py docs/results/p2p-h200.csv

One table per test and datatype: a column per contender, each row a size,
and the ratio of every Loom contender to the CUDA-aware peer (ucx-cuda)
where the peer ran, else to the naive path. Latency in microseconds (lower
is better), bandwidth in GB/s (higher is better).
"""
import csv
import sys
from collections import defaultdict


def size(n):
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def main(path):
    rows = defaultdict(dict)  # (test, type) -> {(label, bytes): value}
    labels = []
    with open(path) as f:
        for r in csv.reader(f):
            if len(r) != 5 or r[0] == "label":
                continue
            label, test, typ, nbytes, value = r
            rows[(test, typ)][(label, int(nbytes))] = float(value)
            if label not in labels:
                labels.append(label)
    for (test, typ), cells in sorted(rows.items()):
        have = [l for l in labels if any(k[0] == l for k in cells)]
        ref = "ucx-cuda" if "ucx-cuda" in have else "naive"
        looms = [l for l in have if l.startswith("loom")]
        unit = "µs, one-way" if test == "lat" else "GB/s, window of 64"
        print(f"\n### {'latency' if test == 'lat' else 'bandwidth'}, {typ} ({unit})\n")
        head = ["size"] + have + [f"{l} / {ref}" for l in looms]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for n in sorted({k[1] for k in cells}):
            line = [size(n)] + [f"{cells[(l, n)]:.2f}" if (l, n) in cells else "" for l in have]
            for l in looms:
                a, b = cells.get((l, n)), cells.get((ref, n))
                if a is None or b is None:
                    line.append("")
                elif test == "lat":  # speed-up: the reference's time over Loom's
                    line.append(f"{b / a:.2f}x")
                else:
                    line.append(f"{a / b:.2f}x")
            print("| " + " | ".join(line) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
