#!/usr/bin/env python3
"""Summarize the CSV of `wscope bench` (deploy/gpu-measure.sh bench-grid): per batch size,

  1. the cumulative decode throughput of growing every sequence from the smallest measured
     context to each larger one, integrating the measured step time over the context
     (step time linear between measured contexts: decoding n tokens from c0 takes
     sum over c in [c0, c0 + n) of step(c) ~ the trapezoid integral of step(c) dc), per policy;
  2. WriteScope's speedup over each baseline at every point, marked ~ where the two points'
     p10-p90 step-time ranges overlap (CSVs with the spread columns), and the geometric mean
     over the points at contexts >= --headline-from (default 8192).

Only the standard library. Usage:
  python3 deploy/bench_report.py docs/runs/h200-run18-bench-grid.csv [--headline-from 8192]
"""
import argparse
import csv
import math
import sys
from collections import defaultdict


def load(path):
    rows = []
    with open(path) as f:
        for row in csv.DictReader(f):
            try:
                rows.append({
                    "policy": row["policy"],
                    "batch": int(row["batch"]),
                    "context": int(row["context"]),
                    "tokens_per_s": float(row["tokens_per_s"]),
                    "step_ms": float(row["step_ms"]),
                    # The spread of the point's step times (CSVs of later benches); None before.
                    "p10": float(row["step_ms_p10"]) if row.get("step_ms_p10") else None,
                    "p90": float(row["step_ms_p90"]) if row.get("step_ms_p90") else None,
                })
            except (KeyError, ValueError) as e:
                raise SystemExit(f"{path}: bad row {row}: {e}")
    return rows


def cumulative_tokens_per_s(points, batch):
    """points: sorted [(context, step_ms)]. Returns [(c1, tokens/s decoding c0 -> c1)]."""
    out = []
    c0 = points[0][0]
    seconds = 0.0
    for (ca, ta), (cb, tb) in zip(points, points[1:]):
        seconds += (cb - ca) * (ta + tb) / 2 / 1e3  # one step per decoded token
        out.append((cb, batch * (cb - c0) / seconds if seconds > 0 else float("nan")))
    return out


def spreads_overlap(a, b):
    """Whether two points' p10-p90 step-time ranges overlap (the difference is within the
    run's noise); False when a CSV has no spread."""
    if None in (a["p10"], a["p90"], b["p10"], b["p90"]):
        return False
    return a["p10"] <= b["p90"] and b["p10"] <= a["p90"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--headline-from", type=int, default=8192)
    args = parser.parse_args()
    rows = load(args.csv)
    if not rows:
        raise SystemExit(f"{args.csv}: no rows")
    by = defaultdict(dict)  # (policy, batch) -> {context: row}
    for r in rows:
        by[(r["policy"], r["batch"])][r["context"]] = r  # the last row of a point wins
    policies = sorted({p for p, _ in by}, key=lambda p: (p != "writescope", p))
    batches = sorted({b for _, b in by})

    print("Cumulative decode throughput (tokens/s), every sequence decoded from the smallest "
          "measured context:")
    for batch in batches:
        for policy in policies:
            points = sorted((c, r["step_ms"]) for c, r in by.get((policy, batch), {}).items())
            if len(points) < 2:
                continue
            cum = cumulative_tokens_per_s(points, batch)
            print(f"  batch {batch:3d} {policy:14s} " + "  ".join(
                f"{points[0][0]}->{c}: {v:7.1f}" for c, v in cum))

    print("\nWriteScope's speedup (tokens/s ratio) over each baseline, per point "
          "(~: the two p10-p90 step-time ranges overlap):")
    ratios = defaultdict(list)  # baseline -> ratios at contexts >= headline_from
    for batch in batches:
        ws = by.get(("writescope", batch), {})
        for context in sorted(ws):
            cells = []
            best = None
            for policy in policies:
                if policy == "writescope":
                    continue
                other = by.get((policy, batch), {}).get(context)
                if other is None or other["tokens_per_s"] <= 0:
                    continue
                ratio = ws[context]["tokens_per_s"] / other["tokens_per_s"]
                noise = "~" if spreads_overlap(ws[context], other) else ""
                cells.append(f"{policy} {ratio:.2f}x{noise}")
                best = other["tokens_per_s"] if best is None else max(best, other["tokens_per_s"])
                if context >= args.headline_from:
                    ratios[policy].append(ratio)
            vs_best = f"; vs the best baseline {ws[context]['tokens_per_s'] / best:.2f}x" if best else ""
            print(f"  batch {batch:3d} context {context:6d}: " + ", ".join(cells) + vs_best)

    print(f"\nGeometric mean over the points at contexts >= {args.headline_from}:")
    for policy, values in sorted(ratios.items()):
        gm = math.exp(sum(math.log(v) for v in values) / len(values))
        print(f"  writescope / {policy:14s} {gm:.2f}x over {len(values)} points")
    if not ratios:
        print("  (no points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
