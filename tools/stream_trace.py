#!/usr/bin/env python3
"""Where an enqueued ping-pong's time goes, from LOOM_STREAM_TRACE files.

Reads PREFIX.0.csv and PREFIX.1.csv (two ranks of `loom-bench stream`, or of
any program whose ranks 0 and 1 ping-pong with tag 0 on MPIX_*_enqueue) and
prints, per message size, the median of each hop of a round trip in
microseconds (the two ranks share the node's monotonic clock):

  post->done   rank 0's thread posts its send (its stream reached it) until
               rank 1's thread has the receive's bytes or header
  done->ret    until rank 1's stream is past the receive (its copy)
  ret->post    until rank 1's stream reaches its send (the kernel before it)
  and the same three back, then the round trip's median and 90th
  percentile (a stall that hits one round in five shows in the latter).
The program's other phases (a benchmark's warm-up, other tables) fall
between some rounds: keep to medians and percentiles.

    python3 tools/stream_trace.py PREFIX
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict


def load(path):
    rows = list(csv.DictReader(open(path)))
    for r in rows:
        for k in ("bytes", "tag", "enqueued_ns", "posted_ns", "done_ns", "retired_ns"):
            r[k] = int(r[k])
    rows.sort(key=lambda r: r["enqueued_ns"])
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["tag"] == 0 and r["op"] in ("send", "recv"):
            by[r["bytes"]][r["op"]].append(r)
    return by


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="example: LOOM_STREAM_TRACE=/tmp/pp mpirun -np 2 -x LOOM_STREAM_TRACE "
        "loom-bench stream; python3 tools/stream_trace.py /tmp/pp")
    ap.add_argument("prefix", help="LOOM_STREAM_TRACE's value (PREFIX.0.csv, PREFIX.1.csv)")
    args = ap.parse_args()
    a, b = load(args.prefix + ".0.csv"), load(args.prefix + ".1.csv")
    cols = ["0->1 post->done", "done->ret", "ret->post", "1->0 post->done", "done->ret",
            "ret->post", "round trip", "p90 round trip"]
    print("| bytes | " + " | ".join(cols) + " |")
    print("|---:|" + "---:|" * len(cols))
    for n in sorted(set(a) & set(b)):
        s0, r0, s1, r1 = a[n]["send"], a[n]["recv"], b[n]["send"], b[n]["recv"]
        m = min(len(s0), len(r0), len(s1), len(r1))
        if m < 2:
            continue
        hops = defaultdict(list)
        for k in range(m - 1):
            v = [r1[k]["done_ns"] - s0[k]["posted_ns"], r1[k]["retired_ns"] - r1[k]["done_ns"],
                 s1[k]["posted_ns"] - r1[k]["retired_ns"], r0[k]["done_ns"] - s1[k]["posted_ns"],
                 r0[k]["retired_ns"] - r0[k]["done_ns"], s0[k + 1]["posted_ns"] - r0[k]["retired_ns"],
                 s0[k + 1]["posted_ns"] - s0[k]["posted_ns"]]
            for i, x in enumerate(v):
                hops[i].append(x / 1e3)
        rt = sorted(hops[6])
        cells = [statistics.median(hops[i]) for i in range(7)] + [rt[int(0.9 * (len(rt) - 1))]]
        print(f"| {n} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
