#!/usr/bin/env python3
"""Turns the benchmark CSVs under docs/results/ into PNGs beside them.

    python3 tools/plot_results.py docs/results/            # every CSV there
    python3 tools/plot_results.py halo.csv --out plots/     # chosen files, elsewhere

One PNG per CSV, its kind read from its columns:
  collectives  (loom-bench coll: op,ranks,bytes,<method>...)  time vs bytes, log-log, a panel per op
  point-to-point (loom-p2p: label,test,type,bytes,value)      latency and bandwidth vs bytes, log-log
  halo         (loom-halo --csv: ...,mode,method,us_per_exchange,...)  speed-up over naive staging
               and time over the hand-packed reference, bars per mode, a group per grid
  other CSVs with a `bytes` column: every numeric column vs bytes, log-log.
Exits 77 (a skip to ctest) when matplotlib is missing, 1 when a CSV cannot be read.
"""

import argparse
import csv
import math
import os
import sys
from collections import OrderedDict


def read_rows(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
    if not rows:
        raise ValueError("empty")
    # loom-p2p prints rows without a header line.
    if len(rows[0]) == 5 and rows[0][1] in ("lat", "bw"):
        rows.insert(0, ["label", "test", "type", "bytes", "value"])
    header = [h.strip() for h in rows[0]]
    out = []
    for r in rows[1:]:
        if len(r) != len(header):
            raise ValueError(f"row of {len(r)} fields under a header of {len(header)}: {r}")
        out.append(dict(zip(header, (v.strip() for v in r))))
    return header, out


def number(v):
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def kind_of(header):
    h = set(header)
    if {"mode", "method", "us_per_exchange", "naive_over_this"} <= h:
        return "halo"
    if {"label", "test", "type", "bytes", "value"} <= h:
        return "p2p"
    if {"op", "ranks", "bytes"} <= h:
        return "coll"
    if "bytes" in h:
        return "sweep"
    return None


def size_axis(ax):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.grid(True, which="both", alpha=0.3)


def plot_coll(plt, header, rows, title):
    ops = list(OrderedDict.fromkeys(r["op"] for r in rows))
    methods = [h for h in header if h not in ("op", "ranks", "bytes")]
    cols = min(3, len(ops))
    nrows = (len(ops) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        sel = [r for r in rows if r["op"] == op]
        lowest = []
        for m in methods:
            pts = [(number(r["bytes"]), number(r[m])) for r in sel]
            pts = [(b, t * 1e6) for b, t in pts if b and t is not None and t > 0]
            if pts:
                style = dict(linestyle="--", color="gray") if m == "bound" else dict(marker="o", ms=3)
                ax.plot(*zip(*pts), label=m, **style)
                if m != "bound":
                    lowest.append(min(t for _, t in pts))
        size_axis(ax)
        ax.set_yscale("log")
        # The copy bound of small messages lies decades below any latency:
        # cut it off rather than squash the measured curves.
        if lowest:
            ax.set_ylim(bottom=min(lowest) / 5)
        ax.set_ylabel("time (us)")
        ax.set_title(f"{op}, {sel[0]['ranks']} ranks")
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def plot_p2p(plt, header, rows, title):
    tests = [t for t in ("lat", "bw") if any(r["test"] == t for r in rows)]
    fig, axes = plt.subplots(1, len(tests), figsize=(6 * len(tests), 4.2), squeeze=False)
    for ax, test in zip(axes.flat, tests):
        sel = [r for r in rows if r["test"] == test]
        for label, typ in OrderedDict.fromkeys((r["label"], r["type"]) for r in sel):
            pts = [(number(r["bytes"]), number(r["value"])) for r in sel
                   if r["label"] == label and r["type"] == typ]
            pts = sorted((b, v) for b, v in pts if b and v)
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=f"{label} ({typ})",
                        linestyle="-" if typ == "contig" else "--")
        size_axis(ax)
        ax.set_yscale("log")
        ax.set_ylabel("one-way latency (us)" if test == "lat" else "bandwidth (GB/s)")
        ax.set_title("latency" if test == "lat" else "bandwidth")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return fig


def halo_label(r):
    return r["mode"] if r["mode"] != "loom" else f"loom {r['method']}"


def plot_halo(plt, header, rows, title):
    timed = [r for r in rows if (number(r["us_per_exchange"]) or 0) > 0]
    grids = list(OrderedDict.fromkeys(
        (r["ranks"], r["nx"], r["ny"], r["nz"], r["q"], r["r"]) for r in timed))
    modes = list(OrderedDict.fromkeys(halo_label(r) for r in timed))
    fig, axes = plt.subplots(1, 2, figsize=(max(10, 1.6 * len(modes) * len(grids) + 4), 4.5))
    width = 0.8 / max(1, len(modes))
    panels = (("naive_over_this", "speed-up over naive staging (x)"),
              ("this_over_hand", "time / hand-packed (x, lower is better)"))
    for ax, (col, ylabel) in zip(axes, panels):
        for i, mode in enumerate(modes):
            xs, ys = [], []
            for g, grid in enumerate(grids):
                for r in timed:
                    key = (r["ranks"], r["nx"], r["ny"], r["nz"], r["q"], r["r"])
                    v = number(r[col])
                    if key == grid and halo_label(r) == mode and v and v > 0:
                        xs.append(g + (i - (len(modes) - 1) / 2) * width)
                        ys.append(v)
            bars = ax.bar(xs, ys, width, label=mode)
            ax.bar_label(bars, fmt="%.2g", fontsize=7)
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xticks(range(len(grids)))
        ax.set_xticklabels([f"{g[0]} ranks\n{g[1]}x{g[2]}x{g[3]}\nq={g[4]} r={g[5]}" for g in grids],
                           fontsize=8)
        ax.set_ylabel(ylabel)
        if col == "naive_over_this":
            ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    device = timed[0].get("device", "") if timed else ""
    fig.suptitle(f"{title} ({device})" if device else title)
    return fig


def plot_sweep(plt, header, rows, title):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for col in header:
        if col == "bytes":
            continue
        pts = [(number(r["bytes"]), number(r[col])) for r in rows]
        pts = [(b, v) for b, v in pts if b and v and v > 0]
        if len(pts) == len(rows) and pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=col)
    size_axis(ax)
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(title)
    return fig


PLOTS = {"coll": plot_coll, "p2p": plot_p2p, "halo": plot_halo, "sweep": plot_sweep}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="CSV files or folders of them")
    ap.add_argument("--out", help="folder for the PNGs (default: beside each CSV)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_results: matplotlib is not installed (pip install matplotlib); no plots made")
        return 77
    files = []
    for p in args.paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".csv"))
        else:
            files.append(p)
    if not files:
        print("plot_results: no CSV files in " + " ".join(args.paths))
        return 1
    status = 0
    for path in files:
        stem = os.path.splitext(os.path.basename(path))[0]
        try:
            header, rows = read_rows(path)
            kind = kind_of(header)
            if kind is None:
                print(f"plot_results: {path}: columns not known, skipped")
                continue
            if not rows:
                raise ValueError("no rows")
            fig = PLOTS[kind](plt, header, rows, stem)
        except (OSError, ValueError, KeyError) as e:
            print(f"plot_results: {path}: {e}", file=sys.stderr)
            status = 1
            continue
        out_dir = args.out or os.path.dirname(path) or "."
        os.makedirs(out_dir, exist_ok=True)
        png = os.path.join(out_dir, stem + ".png")
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        plt.close(fig)
        print(f"{png} ({kind})")
    return status


if __name__ == "__main__":
    sys.exit(main())
