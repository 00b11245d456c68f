#!/usr/bin/env python3
"""Turns the benchmark CSVs under docs/results/ into PNGs beside them.

    python3 tools/plot_results.py docs/results/            # every CSV there
    python3 tools/plot_results.py halo.csv --out plots/     # chosen files, elsewhere

One PNG per CSV, its kind read from its columns:
  collectives  (loom-bench coll: op,ranks,bytes,<method>...)  time vs bytes, log-log, a panel per op
  point-to-point (loom-p2p: label,test,type,bytes,value)      latency and bandwidth vs bytes, log-log
  halo         (loom-halo --csv: ...,mode,method,us_per_exchange,...)  time per exchange, speed-up
               over naive staging and time over the hand-packed reference, bars per mode,
               a group per grid
  strided      (tools/peers/strided_transfer.py: op,bytes,GB/s,...)  GB/s vs bytes, a line per op
  stream       (loom-bench stream --csv: table,ranks,size,cpu_driven_us,mpix_us,mpis_us,...)
               time of a round trip (ping-pong) or an iteration (halo) vs size, a line per way
  ddtbench     (loom-ddtbench --csv: pattern,...,pack_us,d2d_bound_us,...)  pack and unpack
               speed per pattern beside the device-to-device copy bound and the naive path,
               and ping-pong times where measured
  tempi        (TEMPI's bench-mpi-pack: s,count,numblocks,stride,blocklengths,<type> (MiB/s)...)
               GB/s by block size, a panel per packed size, a line per datatype spelling
  pack         (loom-bench devpack, tools/peers/torch_pack.py: [source,]op,target,block,GB/s)
               GB/s by block size, a panel per operation and packed size, a line per source
  d2d          (--merge of tempi and pack CSVs, one library each, named by what tells the
               file names apart: pack-{tempi,loom,torch}-h200.csv give tempi, loom, torch)
               GB/s of a pack call by block size, a line per library, a panel per packed
               size that every file has (count 1; a TEMPI-format file's first spelling)
  other CSVs with a `bytes` column: every numeric column vs bytes, log-log.
  bars         (a Markdown table's rows, as --csv writes them for loom-bench commit, pack,
               passthrough, memtype and loom-bench-gpu: label columns, then numbers) a bar
               per row, a panel per column of numbers only; the label is the fewest leading
               text columns that tell the rows apart (none do: skipped).
The title names the results page beside the CSV (the .md of the same folder that
mentions its file name: its heading and date) and the device column, if any.
--merge NAME plots CSVs of one kind as one figure, NAME.png (the halo grids side by side;
TEMPI-format and pack CSVs: the d2d figure of their libraries).
Exits 77 (a skip to ctest) when matplotlib is missing, 1 when a CSV cannot be read.
"""

import argparse
import csv
import math
import os
import re
import statistics
import sys
import textwrap
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
        x = float(v.rstrip("%") if isinstance(v, str) else v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def kind_of(header):
    h = set(header)
    if {"mode", "method", "us_per_exchange", "naive_over_this"} <= h:
        return "halo"
    if {"pattern", "packed_bytes", "pack_us", "d2d_bound_us"} <= h:
        return "ddtbench"
    if {"op", "target", "block", "GB/s"} <= h:
        return "pack"
    if {"op", "bytes", "GB/s"} <= h:
        return "strided"
    if {"table", "ranks", "size", "cpu_driven_us", "mpix_us", "mpis_us"} <= h:
        return "stream"
    if {"label", "test", "type", "bytes", "value"} <= h:
        return "p2p"
    if {"case", "method", "measured_us", "predicted_us"} <= h:
        return "model"
    if {"op", "ranks", "bytes"} <= h:
        return "coll"
    if {"count", "numblocks", "stride", "blocklengths"} <= h:
        return "tempi"
    if "bytes" in h:
        return "sweep"
    if len(header) >= 2:
        return "bars"
    return None


def size_name(n):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            v = n / f
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.4g} {unit}"
    return f"{n:.0f} B"


def size_axis(ax, what="message size"):
    ax.set_xscale("log", base=2)
    ax.set_xlabel(what)
    lo, hi = ax.get_xlim()
    ticks = [2.0 ** k for k in range(0, 41, 2) if lo <= 2.0 ** k <= hi]
    if len(ticks) > 8:
        ticks = ticks[::2]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_name(t) for t in ticks], fontsize=8)
    ax.minorticks_off()
    ax.grid(True, which="major", alpha=0.3)


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
        ax.set_ylabel("time (µs, lower is better)")
        ax.set_title(f"{op}, {sel[0]['ranks']} ranks")
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_p2p(plt, header, rows, title):
    panels = [(t, ty) for t in ("lat", "bw") for ty in ("contig", "vector")
              if any(r["test"] == t and r["type"] == ty for r in rows)]
    labels = list(OrderedDict.fromkeys(r["label"] for r in rows))
    colour = {lab: f"C{i}" for i, lab in enumerate(labels)}
    cols = min(2, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6.2 * cols, 4.2 * nrows), squeeze=False)
    for ax, (test, typ) in zip(axes.flat, panels):
        sel = [r for r in rows if r["test"] == test and r["type"] == typ]
        for label in labels:
            runs = {}  # repeated runs of a size: their median
            for r in sel:
                b, v = number(r["bytes"]), number(r["value"])
                if r["label"] == label and b and v:
                    runs.setdefault(b, []).append(v)
            pts = sorted((b, statistics.median(vs)) for b, vs in runs.items())
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=label, color=colour[label])
        size_axis(ax, "message size (data bytes)")
        ax.set_yscale("log")
        ax.set_ylabel("one-way latency (µs, lower is better)" if test == "lat"
                      else "bandwidth (GB/s, higher is better)")
        shape = "contiguous" if typ == "contig" else "vector: 8 B blocks, stride 16 B"
        ax.set_title(f"{'latency' if test == 'lat' else 'bandwidth'}, {shape}", fontsize=10)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    return fig


def halo_label(r):
    # Loom's rows by method; the other modes' by a variant, where one is set.
    if r["mode"] == "loom" or r.get("method"):
        return f"{r['mode']} {r['method']}"
    return r["mode"]


def plot_halo(plt, header, rows, title):
    timed = [r for r in rows if (number(r["us_per_exchange"]) or 0) > 0]
    grids = list(OrderedDict.fromkeys(
        (r["ranks"], r["nx"], r["ny"], r["nz"], r["q"], r["r"]) for r in timed))
    modes = list(OrderedDict.fromkeys(halo_label(r) for r in timed))
    panels = [("us_per_exchange", "time per exchange (µs, lower is better)")]
    if any((number(r["naive_over_this"]) or 0) > 0 for r in timed):
        panels.append(("naive_over_this", "speed-up over naive staging (x, higher is better)"))
    panels.append(("this_over_hand", "time / hand-packed (x, lower is better)"))
    # Panels one above the other, a group of bars per grid.
    width_in = max(7.0, 0.33 * len(modes) * len(grids) + 2.5)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width_in, 3.3 * len(panels) + 0.8),
                             squeeze=False)
    width = 0.8 / max(1, len(modes))
    for ax, (col, ylabel) in zip(axes.flat, panels):
        for i, mode in enumerate(modes):
            xs, ys = [], []
            for g, grid in enumerate(grids):
                for r in timed:
                    key = (r["ranks"], r["nx"], r["ny"], r["nz"], r["q"], r["r"])
                    v = number(r[col])
                    if key == grid and halo_label(r) == mode and v and v > 0:
                        xs.append(g + (i - (len(modes) - 1) / 2) * width)
                        ys.append(v)
            bars = ax.bar(xs, ys, width, label=mode, color=f"C{i}")
            ax.bar_label(bars, labels=[f"{v:.0f}" if v >= 100 else f"{v:.3g}" for v in ys],
                         fontsize=6, rotation=90, padding=2)
        if col != "us_per_exchange":
            ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xticks(range(len(grids)))
        ax.set_xticklabels([f"{g[0]} ranks\n{g[1]}x{g[2]}x{g[3]}\nq={g[4]} r={g[5]}" for g in grids],
                           fontsize=8)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_yscale("log")
        ax.margins(y=0.25)
        ax.grid(True, axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=7, ncol=min(4, len(modes)), loc="upper left")
    fig.suptitle(title, fontsize=10)
    return fig


def plot_ddtbench(plt, header, rows, title):
    names = [r["pattern"] for r in rows]
    packed = [number(r["packed_bytes"]) or 0 for r in rows]

    def rate(col):  # GB/s of packed bytes
        return [p / (number(r[col]) * 1e3) if (number(r[col]) or 0) > 0 else 0
                for p, r in zip(packed, rows)]

    series = [("Loom pack", rate("pack_us")), ("Loom unpack", rate("unpack_us")),
              ("D2D copy bound", rate("d2d_bound_us")), ("naive pack", rate("naive_pack_us")),
              ("naive unpack", rate("naive_unpack_us"))]
    pp = any((number(r.get("pingpong_us", "0")) or 0) > 0 for r in rows)
    fig, axes = plt.subplots(2 if pp else 1, 1, figsize=(max(10, 0.75 * len(names)), 9 if pp else 4.8),
                             squeeze=False)
    ax = axes.flat[0]
    width = 0.8 / len(series)
    for i, (label, ys) in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(names))]
        style = dict(color="gray", alpha=0.6) if label.startswith("D2D") else dict(color=f"C{i}")
        ax.bar(xs, [y if y > 0 else float("nan") for y in ys], width, label=label, **style)
    ax.set_yscale("log")
    top = max((y for _, ys in series for y in ys), default=1)
    ax.set_ylim(top=top * 8)  # room for the legend above the bars
    ax.set_ylabel("GB/s of packed data (higher is better)", fontsize=9)
    ax.set_title("pack and unpack on device memory vs the device-to-device copy of the packed "
                 "bytes and the naive path", fontsize=9)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{n}\n{size_name(p)}" for n, p in zip(names, packed)], rotation=45,
                       ha="right", fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=5, loc="upper left")
    if pp:
        ax = axes.flat[1]
        ps = [("Loom ping-pong", "pingpong_us"), ("contiguous (same bytes)", "contiguous_us"),
              ("naive ping-pong", "naive_pingpong_us")]
        width = 0.8 / len(ps)
        for i, (label, col) in enumerate(ps):
            xs = [k + (i - (len(ps) - 1) / 2) * width for k in range(len(names))]
            ys = [number(r[col]) or float("nan") for r in rows]
            ax.bar(xs, [y if y > 0 else float("nan") for y in ys], width, label=label, color=f"C{i + 5}")
        ax.set_yscale("log")
        top = max((number(r[c]) or 0 for r in rows for _, c in ps), default=1)
        ax.set_ylim(top=top * 8)
        ax.set_ylabel("one-way time (µs, lower is better)", fontsize=9)
        ax.set_title("ping-pong of one element between 2 ranks", fontsize=9)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=3, loc="upper left")
    fig.suptitle(title, fontsize=10)
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


def plot_model(plt, header, rows, title):
    """loom-bench pingpong --csv: the model's prediction against the measured
    time, one point a (case, forced method); on the diagonal is exact."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    pts_all = []
    for i, m in enumerate(OrderedDict.fromkeys(r["method"] for r in rows)):
        pts = [(number(r["predicted_us"]), number(r["measured_us"])) for r in rows
               if r["method"] == m]
        pts = [(p, t) for p, t in pts if p and t and p > 0 and t > 0]
        if pts:
            ax.scatter(*zip(*pts), s=14, label=m, color=f"C{i}")
            pts_all += pts
    if pts_all:
        lo = min(min(p, t) for p, t in pts_all) / 1.5
        hi = max(max(p, t) for p, t in pts_all) * 1.5
        ax.plot([lo, hi], [lo, hi], color="gray", linewidth=1, label="exact")
        ax.plot([lo, hi], [lo * 1.2, hi * 1.2], color="gray", linewidth=0.5, linestyle="--",
                label="±20 %")
        ax.plot([lo, hi], [lo / 1.2, hi / 1.2], color="gray", linewidth=0.5, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted one-way time (µs)")
    ax.set_ylabel("measured one-way time (µs)")
    ax.legend(fontsize=8)
    # A narrow figure: the page's long heading goes on several lines.
    ax.set_title("\n".join(textwrap.fill(l, 64) for l in title.split("\n")), fontsize=9)
    fig.tight_layout()
    return fig


def grid(plt, n, per_row, width, height):
    """A figure of n panels, per_row a row (the spare ones hidden): the
    figure and its n axes in order."""
    per_row = max(1, min(per_row, n))
    nrows = (n + per_row - 1) // per_row
    fig, axes = plt.subplots(nrows, per_row, figsize=(width * per_row, height * nrows),
                             squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def gbps_by_block(ax, ylabel, title):
    """A panel of GB/s (log) by block size, titled, with its legend."""
    size_axis(ax, "block size")
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    if ax.get_legend_handles_labels()[0]:  # an unnamed lone line needs none
        ax.legend(fontsize=7)


def lines_by(ax, rows, key, groups, x, y):
    """A line per group (rows whose `key` is it; colours by place in
    `groups`, so they agree across panels): y against x, positive points."""
    for j, g in enumerate(groups):
        pts = sorted((number(r[x]), number(r[y])) for r in rows if r[key] == g)
        pts = [(a, b) for a, b in pts if a and b and b > 0]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=g, color=f"C{j}")


def plot_pack(plt, header, rows, title):
    """loom-bench devpack beside tools/peers/torch_pack.py: GB/s by block
    size, a panel per operation and packed size, a line per source (one
    unnamed where the CSV has no source column)."""
    rows = [dict(r, source=r.get("source", "")) for r in rows]
    panels = list(OrderedDict.fromkeys((r["op"], int(r["target"])) for r in rows))
    sources = list(OrderedDict.fromkeys(r["source"] for r in rows))
    fig, axes = grid(plt, len(panels), 2, 5.5, 3.8)
    for ax, (op, target) in zip(axes, panels):
        lines_by(ax, [r for r in rows if r["op"] == op and int(r["target"]) == target], "source",
                 sources, "block", "GB/s")
        gbps_by_block(ax, "GB/s", f"{op}, {size_name(target)} packed")
    fig.suptitle(title, fontsize=10)
    return fig


def plot_strided(plt, header, rows, title):
    """tools/peers/strided_transfer.py: GB/s of packed data by size, a line per copy."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    lines_by(ax, rows, "op", list(OrderedDict.fromkeys(r["op"] for r in rows)), "bytes", "GB/s")
    size_axis(ax, "packed bytes")
    ax.set_yscale("log")
    ax.set_ylabel("GB/s of packed data")
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    return fig


def plot_stream(plt, header, rows, title):
    """loom-bench stream: CPU-driven, MPIX_*_enqueue and MPIS_* by size, a
    panel per table (ping-pong by bytes, halo by n)."""
    panels = list(OrderedDict.fromkeys((r["table"], r["ranks"]) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.0), squeeze=False)
    for i, (table, ranks) in enumerate(panels):
        ax = axes[0][i]
        sel = [r for r in rows if r["table"] == table and r["ranks"] == ranks]
        for j, (col, name) in enumerate((("cpu_driven_us", "CPU-driven"),
                                         ("mpix_us", "MPIX_*_enqueue"), ("mpis_us", "MPIS_*"))):
            pts = sorted((number(r["size"]), number(r[col])) for r in sel)
            ax.plot(*zip(*pts), marker="o", ms=3, label=name, color=f"C{j}")
        if table == "pingpong":
            size_axis(ax)
            ax.set_ylabel("µs a round trip")
        else:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("n (n^3 cells a rank)")
            ax.set_ylabel("µs an iteration")
        ax.set_yscale("log")
        ax.set_title(f"{table}, {ranks} ranks", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_tempi(plt, header, rows, title):
    """TEMPI's bench-mpi-pack rows (MiB/s per datatype spelling): GB/s by
    block size, a panel per packed size (its `numblocks` column: the bytes an
    object packs to) and count."""
    cols = [h for h in header if h.endswith("(MiB/s)")]
    panels = sorted(set((int(number(r["numblocks"])), r["count"]) for r in rows))
    fig, axes = grid(plt, len(panels), 3, 4.5, 3.6)
    for ax, (packed, count) in zip(axes, panels):
        sel = [r for r in rows if int(number(r["numblocks"])) == packed and r["count"] == count]
        for j, c in enumerate(cols):
            pts = sorted((number(r["blocklengths"]), number(r[c]) * 1.048576e-3) for r in sel)
            pts = [(a, b) for a, b in pts if a and b and b > 0]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=c.replace(" (MiB/s)", ""),
                        color=f"C{j}")
        gbps_by_block(ax, "GB/s (a call, synchronised)",
                      f"{size_name(packed)} packed, count {count}")
    fig.suptitle(title, fontsize=10)
    return fig


def library_names(paths):
    """What tells the files apart: their names less the leading and trailing
    "-"-separated words they share (pack-tempi-h200.csv, pack-loom-h200.csv:
    tempi, loom); a lone file, its name."""
    words = [os.path.splitext(os.path.basename(p))[0].split("-") for p in paths]
    if len(words) < 2:
        return ["-".join(w) for w in words]
    head = 0
    while all(len(w) > head + 1 and w[head] == words[0][head] for w in words):
        head += 1
    tail = 0
    while all(len(w) > head + tail + 1 and w[-1 - tail] == words[0][-1 - tail] for w in words):
        tail += 1
    return ["-".join(w[head:len(w) - tail]) for w in words]


def d2d_rows(kind, header, rows, name):
    """One library's pack calls, as (library, target, block, GB/s) rows: of a
    TEMPI-format CSV its count-1 rows of the first datatype spelling (MiB/s
    made GB/s), of a pack CSV its `pack` rows."""
    out = []
    if kind == "tempi":
        col = next(h for h in header if h.endswith("(MiB/s)"))
        label = f"{name}, {col.replace(' (MiB/s)', '')}"
        for r in rows:
            v = number(r[col])
            if r["count"] == "1" and v:
                out.append({"library": label, "target": int(number(r["numblocks"])),
                            "block": r["blocklengths"], "GB/s": str(v * 1.048576e-3)})
    else:
        for r in rows:
            if r["op"] == "pack":
                label = f"{name}, {r['source']}" if r.get("source") else name
                out.append({"library": label, "target": int(r["target"]), "block": r["block"],
                            "GB/s": r["GB/s"]})
    return out


def plot_d2d(plt, header, rows, title):
    """Libraries side by side: GB/s of a pack call (device to device) by
    block size, a line per library, a panel per packed size all of them have."""
    libraries = list(OrderedDict.fromkeys(r["library"] for r in rows))
    targets = sorted(set.intersection(*(set(r["target"] for r in rows if r["library"] == lib)
                                        for lib in libraries)))
    if not targets:
        raise ValueError("no packed size that every file has")
    fig, axes = grid(plt, len(targets), 3, 5.5, 4.0)
    for ax, target in zip(axes, targets):
        lines_by(ax, [r for r in rows if r["target"] == target], "library", libraries, "block",
                 "GB/s")
        gbps_by_block(ax, "GB/s of packed data (a call, synchronised)",
                      f"{size_name(target)} packed, count 1")
    fig.suptitle(title, fontsize=10)
    return fig


def plot_bars(plt, header, rows, title):
    """A Markdown table's rows: a horizontal bar per row (its first cell),
    a panel per column whose every cell is a number. None: not such a table."""
    # The label: the leading text columns, as few as make it unique.
    texts = []
    for h in header:
        if all(number(r[h]) is not None for r in rows):
            break
        texts.append(h)
        names = [", ".join(r[t] for t in texts) for r in rows]
        if len(set(names)) == len(names):
            break
    else:
        return None
    if not texts or len(set(names)) != len(names):
        return None
    cols = [h for h in header if h not in texts and all(number(r[h]) is not None for r in rows)]
    if not cols:
        return None
    per_row = min(3, len(cols))
    height = max(2.5, (0.28 if len(rows) <= 30 else 0.15) * len(rows) + 1.2)
    fig, axes = grid(plt, len(cols), per_row, 4.6 + 2.5 / per_row, height)
    ys = list(range(len(rows)))
    for i, (ax, c) in enumerate(zip(axes, cols)):
        vals = [number(r[c]) for r in rows]
        ax.barh(ys, vals, color=f"C{i % 10}")
        ax.set_yticks(ys)
        ax.set_yticklabels(names if i % per_row == 0 else [], fontsize=7 if len(rows) <= 30 else 5)
        ax.invert_yaxis()
        ax.set_title(c, fontsize=8)
        positive = [v for v in vals if v > 0]
        if positive and min(vals) > 0 and max(positive) / min(positive) > 100:
            ax.set_xscale("log")
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return fig


PLOTS = {"d2d": plot_d2d, "tempi": plot_tempi, "bars": plot_bars, "stream": plot_stream, "strided": plot_strided, "model": plot_model, "coll": plot_coll, "p2p": plot_p2p, "halo": plot_halo, "ddtbench": plot_ddtbench,
         "sweep": plot_sweep, "pack": plot_pack}


def page_of(path):
    """The heading and date of the results page (.md beside the CSV) that names it."""
    folder = os.path.dirname(path) or "."
    name = os.path.basename(path)
    for md in sorted(os.listdir(folder)):
        if not md.endswith(".md"):
            continue
        with open(os.path.join(folder, md), encoding="utf-8") as f:
            text = f.read()
        if name not in text:
            continue
        lines = text.splitlines()
        heading = next((l[2:].strip() for l in lines if l.startswith("# ")), md)
        first = next(i for i, l in enumerate(lines) if name in l)
        # The run's date: the last one before the file's first mention (pages
        # add re-runs as sections, each with its date), else the page's first.
        dates = re.findall(r"20\d\d-\d\d-\d\d", "\n".join(lines[:first + 1]))
        date = dates[-1] if dates else next(iter(re.findall(r"20\d\d-\d\d-\d\d", text)), None)
        if date and date not in heading:
            heading += f", {date}"
        # The setup in bold that the first mention of the file follows, if any
        # ("**1 H200, 2 ranks sharing it under MPS**").
        bold = next((re.match(r"\*\*(.+?)\*\*", l) for l in reversed(lines[:first + 1])
                     if l.startswith("**")), None)
        return heading + (f"\n{bold.group(1)}" if bold else "")
    return ""


def title_of(paths, rows):
    """What the figure shows: the page's heading (device, date), the files, the device."""
    pages = list(OrderedDict.fromkeys(p for p in (page_of(x) for x in paths) if p))
    stems = ", ".join(os.path.splitext(os.path.basename(x))[0] for x in paths)
    devices = list(OrderedDict.fromkeys(r["device"] for r in rows if r.get("device")))
    lines = pages[:1] + [stems + (f" ({', '.join(devices)})" if devices else "")]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="CSV files or folders of them")
    ap.add_argument("--out", help="folder for the PNGs (default: beside each CSV)")
    ap.add_argument("--merge", metavar="NAME",
                    help="plot all the CSVs given (of one kind) as one figure, NAME.png")
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
    groups = [(args.merge, files)] if args.merge else [
        (os.path.splitext(os.path.basename(f))[0], [f]) for f in files]
    status = 0
    for stem, paths in groups:
        try:
            header, rows, kind = None, [], None
            tables = [(path,) + read_rows(path) for path in paths]
            kinds = [kind_of(h) for _, h, _ in tables]
            # TEMPI-format and pack CSVs merged: a library each, side by side.
            if args.merge and "tempi" in kinds and set(kinds) <= {"tempi", "pack"}:
                kind, header = "d2d", ["library", "target", "block", "GB/s"]
                for (path, h, r), k, name in zip(tables, kinds, library_names(paths)):
                    rows += d2d_rows(k, h, r, name)
                tables = []
            for (path, h, r), k in zip(tables, kinds):
                if k is None:
                    print(f"plot_results: {path}: columns not known, skipped")
                    continue
                if kind is not None and (k != kind or h != header):
                    raise ValueError(f"{path}: not of the kind and columns of {paths[0]}")
                header, kind = h, k
                rows += r
            if kind is None:
                continue
            if not rows:
                raise ValueError("no rows")
            fig = PLOTS[kind](plt, header, rows, title_of(paths, rows))
            if fig is None:
                print(f"plot_results: {', '.join(paths)}: not a table of labelled rows, skipped")
                continue
        except (OSError, ValueError, KeyError) as e:
            print(f"plot_results: {', '.join(paths)}: {e}", file=sys.stderr)
            status = 1
            continue
        out_dir = args.out or os.path.dirname(paths[0]) or "."
        os.makedirs(out_dir, exist_ok=True)
        png = os.path.join(out_dir, stem + ".png")
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        plt.close(fig)
        print(f"{png} ({kind})")
    return status


if __name__ == "__main__":
    sys.exit(main())
