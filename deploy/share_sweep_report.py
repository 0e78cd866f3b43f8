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
  - the same ratio per repeat: the policy's row of a round (and turn: wscope bench --rounds,
    --turns; of one bench where several each numbered their rounds from 0 into the CSV,
    bench-grid.sh without --one-runtime: the n-th of a point is its n-th repeat) against the
    best static share of the same round (the policies of a repeat ran minutes apart at most,
    the repeats further), and their geometric mean; a repeat without every static share of
    the point is left out, and said so.
The points with fewer than two static shares are left out, and counted on a line.

With the grid's steps CSV (--steps, or steps-ARCH.csv[.gz] beside bench-ARCH.csv; from session
38 on it carries the scheduler's lines after each step and its host tokens), each point also
gets the adaptive policy's lines (the median of each over its steps that did not explore) and,
for every policy at the point, what its steps measured per layer (medians over the steps that
did not explore) against what those lines predict at the tokens it read: the CPU's attention
against the CPU line, the GPU's against the split's GPU line, the copy engine's time against
the DMA line, and Q (the step beyond the GPU's attention and its wait for the CPU) against the
line's Q. The CPU time is the mean over all layers, where the line learns from the layers after
the first. A line that is off across the swept shares is the one that moves r* off the curve's
least.
"""
import argparse
import csv
import importlib.util
import math
import os
import statistics
import sys
from collections import defaultdict

sys.dont_write_bytecode = True  # no __pycache__ in deploy/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import RunRounds, round_label  # noqa: E402
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


def report_point(batch, context, merged, repeats, policy):
    """Lines for one point. merged: {policy: merged row}; repeats: {policy: {(run, round,
    turn): row}}."""
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
        per_repeat, left_out = [], []
        for key, own in sorted(repeats[name].items()):
            missing = [s for _, s in statics if key not in repeats[s]]
            if missing:
                left_out.append(f"{round_label(key)} (no {', '.join(missing)})")
                continue
            best = min(step_ms(repeats[s][key]) for _, s in statics)
            per_repeat.append(best / step_ms(own))
        repeat_text = ""
        if per_repeat:
            repeat_text = (f"; per repeat {' '.join(f'{v:.3f}' for v in per_repeat)}, "
                           f"geometric mean {bench_report.geometric_mean(per_repeat):.3f}")
        lines.append(f"  {name}: {step_ms(row):8.2f} ms ({read_text}placed "
                     f"{row['placed_cpu_share']:.3f}); best static / it {best_step / step_ms(row):.3f}"
                     f"{repeat_text}")
        if left_out:
            lines.append(f"    left out of its per-repeat ratios: {len(left_out)} repeat(s) "
                         "without every static share: " + ", ".join(left_out))
    return lines


LINE_COLUMNS = ("cpu_ns_per_token", "cpu_fixed_us", "gpu_ns_per_token", "gpu_fixed_us",
                "dma_ns_per_token", "dma_fixed_us", "chain_extra_us")
STEP_COLUMNS = ("policy", "batch", "context", "step_ms", "gpu_attention_ms", "cpu_attention_ms",
                "transfer_ms", "gpu_waited_cpu_ms", "read_cpu_share", "explore",
                "optimal_cpu_share", "host_tokens") + LINE_COLUMNS


def load_steps(path):
    """{(batch, context): {policy: [step dicts]}} of the steps that did not explore, or None
    when the CSV predates the lines' columns."""
    with bench_report.open_text(path) as f:
        reader = csv.DictReader(f)
        if any(c not in (reader.fieldnames or []) for c in STEP_COLUMNS):
            return None
        steps = defaultdict(lambda: defaultdict(list))
        for line, row in enumerate(reader, start=2):
            try:
                if int(row["explore"]) != 0:
                    continue
                step = {c: float(row[c]) for c in STEP_COLUMNS[3:]}
                steps[(int(row["batch"]), int(row["context"]))][row["policy"]].append(step)
            except ValueError as e:
                raise SystemExit(f"share_sweep_report.py: {path}:{line}: {e}")
    return steps


def median_of(steps, key):
    """The median of key over the steps where it is finite, NaN where it is nowhere."""
    values = [key(s) for s in steps]
    values = [v for v in values if math.isfinite(v)]
    return statistics.median(values) if values else float("nan")


def report_lines(steps_by_policy, layers, policy):
    """Lines for one point: the adaptive policy's lines and every policy's steps against them."""
    own = steps_by_policy.get(policy)
    if not own:
        return [f"  lines: no {policy} step that did not explore"]
    line = {c: median_of(own, lambda s, c=c: s[c]) for c in LINE_COLUMNS}
    r_star = median_of(own, lambda s: s["optimal_cpu_share"])
    out = [f"  {policy}'s lines (medians over its steps): CPU A {line['cpu_ns_per_token']:.2f} "
           f"ns/token, c_C {line['cpu_fixed_us']:.0f} us; GPU B {line['gpu_ns_per_token']:.2f} "
           f"ns/token, c_G {line['gpu_fixed_us']:.0f} us; DMA D {line['dma_ns_per_token']:.2f} "
           f"ns/token, fixed {line['dma_fixed_us']:.0f} us; Q {line['chain_extra_us']:.0f} us; "
           f"its r* {r_star:.3f}",
           "  per layer, ms, measured / the lines at the tokens read (medians over the steps "
           "that did not explore):"]

    def ratio(measured, predicted):
        if not (math.isfinite(measured) and math.isfinite(predicted)) or predicted <= 0:
            return f"{measured:.2f} / {predicted:.2f}"
        return f"{measured:.2f} / {predicted:.2f} ({measured / predicted:.2f})"

    def order(name):
        share = static_share(name)
        return (0, share) if share is not None else (1, name)

    for name in sorted(steps_by_policy, key=order):
        rows = steps_by_policy[name]
        read = median_of(rows, lambda s: s["read_cpu_share"])
        cpu = median_of(rows, lambda s: s["cpu_attention_ms"] / layers)
        gpu = median_of(rows, lambda s: s["gpu_attention_ms"] / layers)
        dma = median_of(rows, lambda s: s["transfer_ms"] / layers)
        q = median_of(rows, lambda s: (s["step_ms"] - s["gpu_attention_ms"] -
                                       s["gpu_waited_cpu_ms"]) / layers)
        tokens = median_of(rows, lambda s: s["host_tokens"])
        cpu_line = (line["cpu_ns_per_token"] * read * tokens + line["cpu_fixed_us"] * 1e3) / 1e6
        gpu_line = (line["gpu_ns_per_token"] * (1 - read) * tokens +
                    line["gpu_fixed_us"] * 1e3) / 1e6
        dma_line = (line["dma_ns_per_token"] * (1 - read) * tokens +
                    line["dma_fixed_us"] * 1e3) / 1e6
        out.append(f"    {name:<12} read {read:.3f}: CPU {ratio(cpu, cpu_line)}, GPU "
                   f"{ratio(gpu, gpu_line)}, DMA {ratio(dma, dma_line)}, Q "
                   f"{ratio(q, line['chain_extra_us'] / 1e3)}")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+")
    parser.add_argument("--policy", default="writescope", help="the adaptive policy")
    parser.add_argument("--steps", help="the grid's steps CSV (with one CSV only; default: "
                        "steps-ARCH.csv[.gz] beside bench-ARCH.csv)")
    args = parser.parse_args()
    if args.steps and len(args.csv) > 1:
        parser.error("--steps goes with one bench CSV")
    printed = 0
    for path in args.csv:
        if not os.path.isfile(path):
            raise SystemExit(f"share_sweep_report.py: no file {path}")
        steps_path = args.steps or bench_report.steps_path_beside(path)
        if args.steps and not os.path.isfile(args.steps):
            raise SystemExit(f"share_sweep_report.py: no file {args.steps}")
        steps = load_steps(steps_path) if steps_path else None
        rows = bench_report.load(path)  # refuses a row whose tokens/s is not above 0
        merged = defaultdict(dict)
        for r in bench_report.merge_repeats(rows):
            merged[(r["batch"], r["context"])][r["policy"]] = r
        # A repeat is a (round, turn) of the bench (one runtime: wscope bench --rounds, --turns)
        # and of one bench where several each numbered their rounds from 0 into the CSV
        # (bench-grid.sh without --one-runtime: one per policy and repeat; bench_plot.RunRounds).
        repeats = defaultdict(lambda: defaultdict(dict))
        runs = RunRounds()
        for r in rows:
            key = (r["round"], r["turn"])
            run = runs.run((r["policy"], r["batch"], r["context"]), key)
            repeats[(r["batch"], r["context"])][r["policy"]][(run, *key)] = r
        print(f"{path}:")
        too_few = []
        for point in sorted(merged):
            shares = [p for p in merged[point] if static_share(p) is not None]
            if len(shares) < 2:
                too_few.append(f"{point[0]} x {point[1]} ("
                               + (f"{shares[0]} only" if shares else "none") + ")")
                continue
            for line in report_point(*point, merged[point], repeats[point], args.policy):
                print(line)
            if steps is not None and point in steps:
                layers = max(r["layers"] for r in merged[point].values())
                if layers > 0:
                    for line in report_lines(steps[point], layers, args.policy):
                        print(line)
            printed += 1
        if too_few:
            print(f"  left out: {len(too_few)} point(s) with fewer than two static shares: "
                  + ", ".join(too_few))
        if steps_path and steps is None:
            print(f"  ({steps_path} predates the lines' columns: no lines)")
    if not printed:
        raise SystemExit("share_sweep_report.py: no point with two static shares in " +
                         ", ".join(args.csv))


if __name__ == "__main__":
    main()
