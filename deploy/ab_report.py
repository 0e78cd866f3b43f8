#!/usr/bin/env python3
"""Compares the variants of an A/B (deploy/ab-grids.sh): each DIR holds one variant's
bench-ARCH.csv, one grid (batches x contexts) per repeat, in order.

  python3 deploy/ab_report.py --arch ARCH [--policy writescope] DIR [DIR...]

Prints, per variant (the DIR's name) and repeat, the geometric mean over the grid's points
(those every repeat of every variant has: a repeat cut short would read faster or slower by
the points it lacks; the others are named) of the step time and of the step time less the
CPU experts (the same expert work in every variant, whose time varies by trio: up to 2x
between trios of one build on the H200 host), then per point the step time of each variant
(mean of its repeats) and its ratio to the first variant's, then, where the DIR has the step
records (steps-ARCH.csv) of writescope, what its reads did over all its windows: the
exploring steps, the changes of mode outside explorations and the steps that missed their
early KV rounds (deploy/modes_report.py counts them per window). Bad input (a missing file or
column, no rows) exits 2 with a message.
"""
import argparse
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import InputError, field, read_csv  # noqa: E402
from bench_report import geometric_mean  # noqa: E402
from modes_report import counts, load_windows  # noqa: E402

COLUMNS = ("policy", "batch", "context", "step_ms", "cpu_expert_ms")


def load(directory, arch, policy):
    """The variant's rows of `policy` split into repeats: a repeat ends where a point
    comes again."""
    path = os.path.join(directory, f"bench-{arch}.csv")
    repeats, seen = [[]], set()
    for line, row in read_csv(path, COLUMNS):
        if row["policy"].strip() != policy:
            continue
        point = (field(path, line, row, "batch", int), field(path, line, row, "context", int))
        step = field(path, line, row, "step_ms")
        experts = field(path, line, row, "cpu_expert_ms")
        if not (experts >= 0 and step > experts):
            raise InputError(f"{path}:{line}: a step ({step}) not above its experts ({experts})")
        if point in seen:
            repeats.append([])
            seen = set()
        seen.add(point)
        repeats[-1].append((point, step, experts))
    if not repeats[0]:
        raise InputError(f"{path}: no rows of {policy}")
    return repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", required=True)
    parser.add_argument("--policy", default="writescope")
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    try:
        variants = [(os.path.basename(os.path.normpath(d)), load(d, args.arch, args.policy))
                    for d in args.dirs]
    except InputError as e:
        print(f"ab_report.py: {e}", file=sys.stderr)
        sys.exit(2)
    # A repeat cut short (the budget, a failed point) has fewer points; a geometric mean over
    # them would weigh other points than the others': the means take the points every repeat
    # of every variant has, and name the ones left out.
    in_repeats = Counter(p for _, repeats in variants for r in repeats for p, _, _ in r)
    total = sum(len(repeats) for _, repeats in variants)
    points = sorted(in_repeats)
    common = {p for p in points if in_repeats[p] == total}
    print(f"A/B of {args.policy} on {args.arch}: geometric means over the points every repeat "
          "of every variant has (ms per step; less the CPU experts)")
    for name, repeats in variants if common else ():
        cells = []
        for r in repeats:
            kept = [(s, e) for p, s, e in r if p in common]
            cells.append(f"{geometric_mean([s for s, _ in kept]):7.2f} "
                         f"({geometric_mean([s - e for s, e in kept]):6.2f})")
        print(f"  {name:<16} {len(repeats)} repeat(s): " + "  ".join(cells))
    if not common:
        print("  none: no point is in every repeat of every variant")
    if len(common) < len(points):
        print(f"  left out of the means: {len(points) - len(common)} point(s) some repeat lacks: "
              + ", ".join(f"batch {b} context {c} (in {in_repeats[(b, c)]} of {total} repeats)"
                          for b, c in points if (b, c) not in common))
    base_name = variants[0][0]
    print(f"Per point: step ms (mean of the repeats) and its ratio to {base_name}'s")
    for point in points:
        means = []
        for name, repeats in variants:
            steps = [s for r in repeats for p, s, _ in r if p == point]
            means.append((name, sum(steps) / len(steps) if steps else None))
        base = means[0][1]
        cells = []
        for name, mean in means:
            if mean is None:
                cells.append(f"{name} -")
            elif base is None or name == base_name:
                cells.append(f"{name} {mean:.2f}")
            else:
                cells.append(f"{name} {mean:.2f} ({mean / base:.3f})")
        print(f"  batch {point[0]:3d} context {point[1]:6d}: " + ", ".join(cells))
    if args.policy != "writescope":
        return
    tallies = []
    for directory, (name, _) in zip(args.dirs, variants):
        path = os.path.join(directory, f"steps-{args.arch}.csv")
        if not os.path.exists(path):
            continue
        try:
            windows = load_windows(path, args.policy)
        except InputError as e:
            print(f"ab_report.py: {e}", file=sys.stderr)
            sys.exit(2)
        per_window = [counts(window[3]) for window in windows]
        missed = [m for _, _, m in per_window]
        tallies.append((name, len(windows), sum(e for e, _, _ in per_window),
                        sum(c for _, c, _ in per_window),
                        None if None in missed else sum(missed)))
    if tallies:
        print("Writescope's reads over all windows (steps-ARCH.csv): exploring steps, changes "
              "of mode outside explorations, steps that missed their early rounds")
        for name, windows, explored, changes, missed in tallies:
            print(f"  {name:<16} {windows} windows: exploring {explored}, changes {changes}, "
                  f"missed {'-' if missed is None else missed}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the reader stopped early (| head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
