#!/usr/bin/env python3
"""Plots iris-bench JSON: one PNG per (operation, dtype) with latency, bus bandwidth and the ratio to NCCL.

    iris-bench --quick -J results.json
    python3 scripts/plot_bench.py results.json plots/

Each PNG has three panels over the message size (log-log): time per call (us), bus bandwidth (GB/s),
and ratio = best NCCL time / iris time (>1: iris faster). Lines: every iris variant measured, NCCL on
the same buffers, NCCL on registered symmetric windows. Rows whose check found wrong elements are
marked with a red x. Needs matplotlib (and nothing else).
"""

import argparse
import json
import math
import os
import sys
from collections import OrderedDict


def human_bytes(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def positive(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def load(path):
    with open(path) as f:
        data = json.load(f)
    if data.get("tool") != "iris-bench":
        sys.exit(f"{path}: not an iris-bench JSON file (no \"tool\": \"iris-bench\")")
    return data


def series_for(rows):
    """Returns OrderedDict label -> list of (size, time_us, busbw, wrong, ratio)."""
    series = OrderedDict()
    nccl_seen = {"nccl": set(), "nccl_sym": set()}
    for r in sorted(rows, key=lambda r: r["size_bytes"]):
        size = r["size_bytes"]
        variant = r.get("variant") or "-"
        label = "iris" if variant == "-" else f"iris {variant}"
        if variant == "auto" and r.get("variant_resolved"):
            label = "iris auto"
        series.setdefault(label, []).append(
            (size, r.get("iris_time_us"), r.get("iris_busbw_gbps"), r.get("iris_wrong"), r.get("ratio")))
        # NCCL figures repeat on every variant's row of a size: keep one.
        for key, name in (("nccl", "NCCL"), ("nccl_sym", "NCCL symmetric")):
            if size in nccl_seen[key]:
                continue
            nccl_seen[key].add(size)
            series.setdefault(name, []).append(
                (size, r.get(f"{key}_time_us"), r.get(f"{key}_busbw_gbps"), r.get(f"{key}_wrong"), None))
    # iris lines first, then NCCL; drop series with nothing measured (e.g. NCCL not built in).
    order = [k for k in series if k.startswith("iris")] + [k for k in series if not k.startswith("iris")]
    return OrderedDict((k, series[k]) for k in order if any(positive(p[1]) for p in series[k]))


def style(label):
    if label.startswith("NCCL symmetric"):
        return dict(color="0.45", linestyle="--", marker="s")
    if label.startswith("NCCL"):
        return dict(color="black", linestyle="-", marker="o")
    return dict(linestyle="-", marker=".")


def plot_group(plt, op, dtype, rows, machine, outdir):
    series = series_for(rows)
    if not series:
        return None
    world = rows[0].get("world", machine.get("world", 0))
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    ax_t, ax_b, ax_r = axes
    for label, pts in series.items():
        st = style(label)
        t = [(s, v) for s, v, _, _, _ in pts if positive(v)]
        b = [(s, v) for s, _, v, _, _ in pts if positive(v)]
        if t:
            ax_t.plot([p[0] for p in t], [p[1] for p in t], label=label, **st)
        if b:
            ax_b.plot([p[0] for p in b], [p[1] for p in b], label=label, **st)
        bad = [(s, v) for s, v, _, w, _ in pts if positive(v) and isinstance(w, int) and w > 0]
        if bad:
            ax_t.plot([p[0] for p in bad], [p[1] for p in bad], "x", color="red", markersize=10, mew=2)
        if label.startswith("iris"):
            r = [(s, v) for s, _, _, _, v in pts if positive(v)]
            if r:
                ax_r.plot([p[0] for p in r], [p[1] for p in r], label=label, **st)

    sizes = sorted({r["size_bytes"] for r in rows})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([human_bytes(s) for s in sizes], rotation=45, ha="right", fontsize=8)
        ax.minorticks_off()
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xlabel("size (B)")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("time per call (us)")
    ax_t.set_title("latency")
    if ax_b.lines:
        ax_b.set_yscale("log")
    ax_b.set_ylabel("bus bandwidth (GB/s)")
    ax_b.set_title("busbw" + (" (0 on 1 GPU)" if world == 1 else ""))
    ax_r.axhline(1.0, color="black", linewidth=0.8)
    ax_r.set_ylabel("best NCCL time / iris time")
    ax_r.set_title("ratio (>1: iris faster)")
    for ax in axes:
        if ax.lines and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    nccl = machine.get("nccl") or "none"
    fig.suptitle(f"{op}, {dtype}, {world} x {machine.get('gpu', '?')}  (NCCL {nccl}, driver {machine.get('driver', '?')})")
    fig.tight_layout()
    path = os.path.join(outdir, f"{op}_{dtype}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="iris-bench -J output")
    ap.add_argument("outdir", help="folder for the PNGs (created)")
    args = ap.parse_args()

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_bench.py needs matplotlib (pip install matplotlib)")

    data = load(args.json)
    machine = data.get("machine", {})
    groups = OrderedDict()
    for r in data.get("results", []):
        groups.setdefault((r["op"], r["dtype"]), []).append(r)
    if not groups:
        sys.exit(f"{args.json}: no results")
    os.makedirs(args.outdir, exist_ok=True)
    written = []
    for (op, dtype), rows in groups.items():
        path = plot_group(plt, op, dtype, rows, machine, args.outdir)
        if path:
            written.append(path)
        else:
            print(f"{op} {dtype}: nothing measured, no plot", file=sys.stderr)
    for p in written:
        print(p)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
