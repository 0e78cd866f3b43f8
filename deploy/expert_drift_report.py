#!/usr/bin/env python3
"""How fast the host's CPU expert time drifts, from the steps CSVs of `wscope bench`
(bench-grid.sh's steps-ARCH.csv, gzipped or not): what a comparison of two policies' turns at
one point carries from the host alone, by the turns' length and distance.

The i-th step of a point routes its tokens alike in every round and turn (wscope bench
--turns), so one policy's cpu_expert_ms at step i of two of its runs of a point (rounds or
turns) is the same work, and d_i = log(the one / the other) follows the host's speed in the one
run against the other. Printed per CSV:
  - between turns of one round (a CSV of wscope bench --turns), between rounds (the same
    turn of consecutive rounds) and between benches (the same round and turn of consecutive
    benches that each numbered their rounds from 0 into the CSV, bench-grid.sh's repeats
    without --one-runtime: a fresh trio each; a step that comes again starts its
    policy-point's next bench, bench_plot.RunRounds): the root mean square, over every policy,
    point and such pair of its runs, of the mean of d_i over the steps both ran (the drift a
    comparison of two runs that far apart carries), and how far apart the runs were (median
    seconds);
  - within runs, for windows of w steps (--windows) s steps apart (s = w, 2w, ...): the root
    mean square of the difference of d's means over the two windows, over sqrt(2) (the two
    runs drift alike and independently): how far two turns of w steps, s steps apart, of one
    policy read apart with nothing changed but the time, and the seconds s steps took
    (median). Those windows share one placement of the context; turns are each placed anew,
    which an adaptive policy may place elsewhere.
Two policies' turns compared at that distance carry that much of the host on top of their
difference; a comparison averaged over n such pairs about 1/sqrt(n) of it.

    deploy/expert_drift_report.py STEPS_CSV [STEPS_CSV ...] [--windows 4,8]

Steps whose cpu_expert_ms is not above 0 (no routed expert ran on the CPU: all hot, or the
experts on the GPU) are left out. Standard library only. Bad input: a message and exit
status 2.
"""
import argparse
import math
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import InputError, RunRounds, field, print_lines, read_csv  # noqa: E402

COLUMNS = ("policy", "round", "step", "unix_s", "batch", "context", "cpu_expert_ms")


def load(path):
    """{(policy, batch, context): {(run, round, turn): {step: (unix_s, cpu_expert_ms)}}}: the
    runs (bench_plot.RunRounds) keep apart the benches that each numbered their rounds from 0
    into the file (bench-grid.sh without --one-runtime: one per policy and repeat)."""
    runs = defaultdict(lambda: defaultdict(dict))
    run_rounds = RunRounds()
    for line, row in read_csv(path, COLUMNS):
        key = ((row["policy"] or "").strip(), field(path, line, row, "batch", int),
               field(path, line, row, "context", int))
        rnd = run_rounds.step(path, line, row)
        ms = field(path, line, row, "cpu_expert_ms")
        if ms > 0:
            runs[key][rnd][field(path, line, row, "step", int)] = (
                field(path, line, row, "unix_s"), ms)
    return runs


def rms(values):
    return math.sqrt(statistics.fmean(v * v for v in values))


def run_pairs(runs):
    """The pairs of one policy-point's runs to compare (runs are keyed (run, round, turn)):
    ("turns", a, b) for consecutive turns of one round, ("rounds", a, b) for the same turn of
    consecutive rounds of one bench, ("benches", a, b) for the same round and turn of
    consecutive benches (bench-grid.sh's repeats without --one-runtime: a fresh trio each)."""
    pairs = []
    for kind, vary in (("turns", 2), ("rounds", 1), ("benches", 0)):
        by = defaultdict(list)  # the runs alike but in the part that varies
        for key in sorted(runs):
            by[key[:vary] + key[vary + 1:]].append(key)
        for keys in by.values():
            pairs.extend((kind, a, b) for a, b in zip(keys, keys[1:]))
    return pairs


def drift(runs, windows):
    """(between: {"turns"|"rounds": [(mean d, seconds apart)]},
    within: {(w, s): [(difference of d's window means, seconds s steps took)]})."""
    between, within = defaultdict(list), defaultdict(list)
    for rounds in runs.values():
        for kind, a, b in run_pairs(rounds):
            common = set(rounds[a]) & set(rounds[b])
            if not common:
                continue
            d = {i: math.log(rounds[a][i][1] / rounds[b][i][1]) for i in common}
            apart = statistics.median(abs(rounds[b][i][0] - rounds[a][i][0]) for i in common)
            between[kind].append((statistics.fmean(d.values()), apart))
            last = max(common)
            for w in windows:
                for start in range(0, last + 1):
                    # The second window starts s steps after the first and ends by `last`.
                    for s in range(w, last + 1 - start - w + 1, w):
                        first = [d[i] for i in range(start, start + w) if i in d]
                        second = [d[i] for i in range(start + s, start + s + w) if i in d]
                        if len(first) == w and len(second) == w:
                            t = rounds[a][start + s][0] - rounds[a][start][0]
                            within[(w, s)].append(
                                (statistics.fmean(second) - statistics.fmean(first), t))
    return between, within


def report(path, runs, windows):
    between, within = drift(runs, windows)
    lines = [f"{path}: {len(runs)} policy-point(s)"]
    if not between:
        lines.append("  no policy ran a point twice: nothing to compare")
        return lines
    for kind, label in (("turns", "between turns of a round"), ("rounds", "between rounds"),
                        ("benches", "between benches (repeats of a trio each)")):
        pairs = between.get(kind)
        if pairs:
            lines.append(f"  {label}: rms of the mean log ratio {rms([d for d, _ in pairs]):.3f} "
                         f"over {len(pairs)} pair(s), median "
                         f"{statistics.median(s for _, s in pairs):.1f} s apart")
    for (w, s), values in sorted(within.items()):
        seconds = statistics.median(t for _, t in values)
        lines.append(f"  within runs, turns of {w:2d} step(s) {s:2d} step(s) ({seconds:.2f} s) "
                     f"apart: rms {rms([v for v, _ in values]) / math.sqrt(2):.3f} over "
                     f"{len(values)} pair(s)")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps_csv", nargs="+")
    parser.add_argument("--windows", default="4,8",
                        help="turn lengths in steps, comma separated (positive)")
    args = parser.parse_args(argv)
    try:
        windows = sorted({int(x) for x in args.windows.split(",")})
    except ValueError:
        windows = []
    if not windows or windows[0] <= 0:
        print(f"expert_drift_report.py: --windows takes positive numbers, not {args.windows!r}",
              file=sys.stderr)
        return 2
    out = []
    try:
        for path in args.steps_csv:
            out.extend(report(path, load(path), windows))
    except InputError as e:
        print(f"expert_drift_report.py: {e}", file=sys.stderr)
        return 2
    print_lines(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
