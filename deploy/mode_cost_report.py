#!/usr/bin/env python3
"""Where writescope's step time went against one baseline, per bench point, from the step CSV
of `wscope bench --steps_csv` (bench-grid.sh's steps-ARCH.csv, gzipped or not) holding both
policies' rounds:

  - writescope's steps by what they ran: the mode (split: the CPU attended some host tokens;
    GPU-only), chosen or exploring, and whether the gpu_worker reported missing the KV rounds
    it queued early for the step. For each: the steps, their mean time over the baseline's
    mean step of the same round (ms), and that excess spread over all of writescope's steps
    at the point: the columns add up to writescope's mean step less the baseline's;
  - writescope's steps by how many steps its mode had run in a row (k = 1 is the first step
    after a change of mode, an exploration's first among them; k = 2 the step an exploration
    of two steps teaches on), each over the median step of the baseline's same round: what a
    change of mode costs the steps after it.

A point's rounds are used where both policies ran them, the others (and the points without
such a round) counted on a "left out:" line; the i-th row of a (round, batch, context) is that
round's i-th step. A round is a (round, turn) of the CSV where the bench ran several turns of
each point (wscope bench --turns), and of one bench where several benches each numbered their
rounds from 0 into the CSV (bench-grid.sh without --one-runtime: one per policy and repeat; a
step that comes again starts its policy-point's next bench, bench_plot.RunRounds).

    deploy/mode_cost_report.py STEPS_CSV [--policy writescope] [--baseline transfer-all]
        [--max-k 5]

Standard library only. Bad input: a message and exit status 2.
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import (InputError, RunRounds, field, print_lines, read_csv,  # noqa: E402
                        round_label)

COLUMNS = ("policy", "round", "step", "step_ms", "batch", "context", "read_cpu_share", "explore")


def load(path, policies):
    """{(batch, context): {(run, round, turn): {policy: [step dicts in file order]}}} for
    `policies`: the runs (bench_plot.RunRounds) keep apart the benches that each numbered their
    rounds from 0 into the file (bench-grid.sh without --one-runtime: one per policy and
    repeat)."""
    points = defaultdict(lambda: defaultdict(dict))
    run_rounds = RunRounds()
    for line, row in read_csv(path, COLUMNS):
        policy = row["policy"].strip()
        if policy not in policies:
            continue
        key = (field(path, line, row, "batch", int), field(path, line, row, "context", int))
        steps = points[key][run_rounds.step(path, line, row)].setdefault(policy, [])
        missed = row.get("early_rounds_missed")
        steps.append({
            "step_ms": field(path, line, row, "step_ms"),
            "split": field(path, line, row, "read_cpu_share") > 0.0,
            "explore": field(path, line, row, "explore", int) != 0,
            "missed": missed is not None and field(path, line, row, "early_rounds_missed",
                                                   int) != 0,
        })
    return points


def category(step):
    name = ("split" if step["split"] else "GPU-only") + (", exploring" if step["explore"]
                                                          else ", chosen")
    return name + (", missed rounds" if step["missed"] else "")


def report_point(batch, context, rounds, policy, baseline, max_k):
    """The point's lines, the rounds without both policies counted on a "left out:" line; none
    where no round has both policies."""
    paired = {r: p for r, p in sorted(rounds.items()) if policy in p and baseline in p}
    if not paired:
        return []
    unpaired = [f"{round_label(r)} (no {baseline if policy in p else policy})"
                for r, p in sorted(rounds.items()) if r not in paired]
    excess = defaultdict(list)    # category -> [ms over the baseline's round mean]
    runs = defaultdict(list)      # (mode, k) -> [step / the baseline's round median]
    ours, theirs = [], []
    for steps in paired.values():
        base = [s["step_ms"] for s in steps[baseline]]
        mean, median = statistics.fmean(base), statistics.median(base)
        theirs.append(mean)
        previous, k = None, 0
        for s in steps[policy]:
            ours.append(s["step_ms"])
            excess[category(s)].append(s["step_ms"] - mean)
            k = k + 1 if s["split"] == previous else 1
            previous = s["split"]
            runs[("split" if s["split"] else "GPU-only", min(k, max_k))].append(
                s["step_ms"] / median)
    total = len(ours)
    our_mean, their_mean = statistics.fmean(ours), statistics.fmean(theirs)
    lines = [f"batch {batch} context {context}: {len(paired)} round(s), {policy} "
             f"{our_mean:.3f} ms a step, {baseline} {their_mean:.3f} (the rounds' means; "
             f"{baseline} / {policy} {their_mean / our_mean:.3f})"]
    if unpaired:
        lines.append(f"  left out: {len(unpaired)} round(s) without both policies: "
                     + ", ".join(unpaired))
    lines.append(f"  {'steps of ' + policy:<36} {'steps':>5} {'ms over ' + baseline:>22} "
                 f"{'ms a step, all steps':>21}")
    for name in sorted(excess, key=lambda n: (n.startswith("GPU"), n)):
        values = excess[name]
        lines.append(f"  {name:<36} {len(values):>5} {statistics.fmean(values):>22.3f} "
                     f"{sum(values) / total:>21.3f}")
    lines.append(f"  {'all':<36} {total:>5} {'':>22} {our_mean - their_mean:>21.3f}")
    lines.append(f"  steps over the median of {baseline}'s same round, by the steps the mode "
                 f"had run in a row (k):")
    for mode in ("GPU-only", "split"):
        cells = []
        for k in range(1, max_k + 1):
            values = runs.get((mode, k))
            label = f"k>={k}" if k == max_k else f"k={k}"
            cells.append(f"{label} " + (f"{statistics.fmean(values):.3f} ({len(values)})"
                                        if values else "-"))
        lines.append(f"    {mode:<9} " + "  ".join(cells))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps_csv")
    parser.add_argument("--policy", default="writescope")
    parser.add_argument("--baseline", default="transfer-all")
    parser.add_argument("--max-k", type=int, default=5, help="the last k row counts k and more")
    args = parser.parse_args(argv)
    if args.max_k < 2:
        print("mode_cost_report.py: --max-k must be at least 2", file=sys.stderr)
        return 2
    if args.policy == args.baseline:
        print("mode_cost_report.py: --policy and --baseline must differ", file=sys.stderr)
        return 2
    try:
        points = load(args.steps_csv, {args.policy, args.baseline})
    except InputError as e:
        print(f"mode_cost_report.py: {e}", file=sys.stderr)
        return 2
    out, unpaired = [], []
    for (batch, context), rounds in sorted(points.items()):
        lines = report_point(batch, context, rounds, args.policy, args.baseline, args.max_k)
        out.extend(lines)
        if not lines:
            ran = {p for by_policy in rounds.values() for p in by_policy}
            unpaired.append(f"{batch} x {context} ({' and '.join(sorted(ran))} only)")
    if unpaired and out:
        out.append(f"left out: {len(unpaired)} point(s) without a round of both {args.policy} and "
                   f"{args.baseline}: " + ", ".join(unpaired))
    if not out:
        print(f"mode_cost_report.py: {args.steps_csv}: no round with both {args.policy} and "
              f"{args.baseline}", file=sys.stderr)
        return 2
    print_lines(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
