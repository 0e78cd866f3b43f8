#!/usr/bin/env python3
"""Is the adaptive policy's CPU share the step's optimum? A grid that ran static:R at several
shares R beside the adaptive policy (and, if present, monolithic) at the same points answers it
empirically: the static shares trace the step time against R, and the adaptive policy's step
and share are read against that curve.

    python3 deploy/share_sweep_report.py [--policy writescope] CSV [CSV ...]

Each CSV is one grid of `wscope bench` (deploy/bench-grid.sh or gpu-grids.sh with --policies
"writescope static:0.3 static:0.4 ..."). Repeated rows of a point are merged as
deploy/bench_report.py merges them (tokens/s: the harmonic mean; the step time printed is the
batch over it). For every point with at least two static shares, printed:
  - each static share R: its step time (ms), the p10-p90 range over its repeats;
  - the best static share, and where a parabola through it and its two neighbours has its
    least (only when the best has a neighbour on both sides: otherwise the optimum may lie
    outside the swept range, said so);
  - each other policy (the adaptive one first): its step, the share it attended (read) and
    placed, and the best static share's step over its step (above 1: the policy is faster
    than every static share swept);
  - the same ratio per repeat: the i-th row of the policy against the best static share among
    the i-th rows (the policies of a repeat ran minutes apart at most, the repeats further),
    and their geometric mean.
"""
import argparse
import importlib.util
import math
import os
import sys
from collections import defaultdict

sys.dont_write_bytecode = True  # no __pycache__ in deploy/
_spec = importlib.util.spec_from_file_location(
    "bench_report", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_report.py"))
bench_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_report)

STATIC = "static:"


def static_share(policy):
    """R of a static:R policy, None for any other policy."""
    if not policy.startswith(STATIC):
        return None
    try:
        return float(policy[len(STATIC):])
    except ValueError:
        return None


def step_ms(row):
    """The step time that the row's throughput means: batch tokens per step."""
    return row["batch"] * 1e3 / row["tokens_per_s"]


def parabola_vertex(points):
    """The R where the parabola through three (R, step) points has its least; None when the
    three do not bend upwards (collinear or a maximum)."""
    (x0, y0), (x1, y1), (x2, y2) = points
    denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
    if denom == 0:
        return None
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denom
    if a <= 0:
        return None
    return -b / (2 * a)


def geometric_mean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def report_point(batch, context, merged, repeats, policy):
    """Lines for one point. merged: {policy: merged row}; repeats: {policy: [rows in order]}."""
    statics = sorted((static_share(p), p) for p in merged if static_share(p) is not None)
    lines = [f"batch {batch:3d} context {context:6d}:"]
    for share, name in statics:
        row = merged[name]
        spread = ""
        if row["p10"] is not None and row["p90"] is not None:
            spread = f" (p10-p90 {row['p10']:.2f}-{row['p90']:.2f})"
        lines.append(f"  static {share:5.3f}: {step_ms(row):8.2f} ms{spread}, "
                     f"{row['repeats']} repeat(s)")
    steps = [(share, step_ms(merged[name])) for share, name in statics]
    best_index = min(range(len(steps)), key=lambda i: steps[i][1])
    best_share, best_step = steps[best_index]
    if 0 < best_index < len(steps) - 1:
        vertex = parabola_vertex(steps[best_index - 1:best_index + 2])
        where = (f"; the parabola through it and its neighbours is least at R = {vertex:.3f}"
                 if vertex is not None else "")
    else:
        side = "lowest" if best_index == 0 else "highest"
        where = f"; it is the {side} share swept, the optimum may lie beyond it"
    lines.append(f"  best static share {best_share:.3f}: {best_step:.2f} ms{where}")
    others = [p for p in merged if static_share(p) is None]
    others.sort(key=lambda p: (p != policy, p))
    for name in others:
        row = merged[name]
        read = row["read_cpu_share"]
        read_text = f"read {read:.3f}, " if read is not None else ""
        per_repeat = []
        for i, own in enumerate(repeats[name]):
            rivals = [repeats[s][i] for _, s in statics if i < len(repeats[s])]
            if rivals and own["tokens_per_s"] > 0:
                per_repeat.append(min(step_ms(r) for r in rivals) / step_ms(own))
        repeat_text = ""
        if per_repeat:
            repeat_text = (f"; per repeat {' '.join(f'{v:.3f}' for v in per_repeat)}, "
                           f"geometric mean {geometric_mean(per_repeat):.3f}")
        lines.append(f"  {name}: {step_ms(row):8.2f} ms ({read_text}placed "
                     f"{row['placed_cpu_share']:.3f}); best static / it {best_step / step_ms(row):.3f}"
                     f"{repeat_text}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+")
    parser.add_argument("--policy", default="writescope", help="the adaptive policy")
    args = parser.parse_args()
    printed = 0
    for path in args.csv:
        if not os.path.isfile(path):
            raise SystemExit(f"share_sweep_report.py: no file {path}")
        rows = bench_report.load(path)
        if any(r["tokens_per_s"] <= 0 for r in rows):
            raise SystemExit(f"share_sweep_report.py: {path} has a row with no throughput")
        merged = defaultdict(dict)
        for r in bench_report.merge_repeats(rows):
            merged[(r["batch"], r["context"])][r["policy"]] = r
        repeats = defaultdict(lambda: defaultdict(list))
        for r in rows:  # in the CSV's order: the i-th row of a policy is its i-th repeat
            repeats[(r["batch"], r["context"])][r["policy"]].append(r)
        print(f"{path}:")
        for point in sorted(merged):
            if sum(static_share(p) is not None for p in merged[point]) < 2:
                continue
            for line in report_point(*point, merged[point], repeats[point], args.policy):
                print(line)
            printed += 1
    if not printed:
        raise SystemExit("share_sweep_report.py: no point with two static shares in " +
                         ", ".join(args.csv))


if __name__ == "__main__":
    main()
