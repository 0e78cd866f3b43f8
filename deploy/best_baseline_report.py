#!/usr/bin/env python3
"""WriteScope against the best baseline at each point, over many grids, and the same measure
applied to every baseline: how often a policy reads below a threshold (issue 7: "never below
0.98x of the best baseline") when it is compared with the best of several noisy means.

    python3 deploy/best_baseline_report.py [--threshold 0.98] [--policy writescope]
        [--from-context 0] CSV [CSV ...]

Each CSV is one grid of `wscope bench` (deploy/bench-grid.sh or gpu-grids.sh): the adaptive
policy (--policy) and baselines at the same points. Repeated rows of a point are merged as
deploy/bench_report.py merges them (tokens/s: the harmonic mean). At every point of every CSV
that has the adaptive policy and at least two baselines:
  - the adaptive policy's tokens/s over the best baseline's;
  - for each baseline B, B's tokens/s and the adaptive policy's over the best of the baselines
    other than B (the same reference set for both).
Printed: per point (the CSV's name without "bench-" and ".csv", batch, context) the adaptive
policy's ratios' geometric mean, least and largest over the CSVs; over all point-runs its
geometric mean and how many are below --threshold; then the same for each baseline B beside
the adaptive policy, both against the baselines other than B.

Where a grid's steps CSV lies beside it (steps-ARCH.csv[.gz], gpu-grids.sh writes it), the same
ratios once more per round (per turn of it, where wscope bench ran --turns), paired step by
step: within a round every policy decodes the same step indices, and the i-th step routes its
tokens to the same experts under each, so each policy's throughput there is taken over its
geometric-mean step over the steps every policy ran. Printed: the adaptive policy over the
best baseline per point, round by round, how many of its rounds are below --threshold, the
points below it in every round, and the pooled lines as above over the point-rounds. A steps
CSV that several benches numbered their rounds from 0 into (bench-grid.sh without
--one-runtime: one per policy and repeat) is read run by run: a step that comes again starts
its policy-point's next run (bench_plot.RunRounds). A round counts only with every policy
the steps CSV has at its point (one a baseline failed in, or the time cut, would compare the
adaptive policy with fewer baselines).

Last, per point, the adaptive policy over ONE best baseline (the baseline fastest by the
geometric mean over the point's paired rounds; the best of each round would favour the
baselines' noise) with a 95 % interval of the mean over the rounds (Student's t of the rounds'
log ratios, the rounds taken as independent): "below" the threshold where the whole interval
is below it, "not below" where none of it is, else "cannot tell", with about how many rounds
at the same mean and spread would tell. Counted over the points, and the same for each
baseline B against the best of the baselines other than B. Where the steps CSV says how the
adaptive policy read each step (its explore and read_cpu_share columns), a line under each
point says where its time beyond that baseline's went: the paired steps' extra time, step by
step, summed per kind of the adaptive policy's step (exploring; the split by choice; GPU-only
by choice), as a share of the baseline's time over the same steps, each the mean over the
rounds with a 95 % interval (Student's t); the three add up to the whole extra time (an
arithmetic share, beside the ratio's geometric mean).

What is left out (a point without the adaptive policy and two baselines, a round without
every policy of its point or without a step they all ran) is counted on a "left out:" line
with the reason.

The best of several means is biased upwards by their noise: a baseline that is the best
choice at a point still reads below 1 against the others where they tie it. A baseline's own
count below the threshold is a floor the adaptive policy's count can be read against.
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
_spec = importlib.util.spec_from_file_location(
    "bench_report", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_report.py"))
bench_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_report)
geometric_mean = bench_report.geometric_mean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import InputError, RunRounds, round_label  # noqa: E402


def keyed_ratios(by_policy, policy):
    """The ratios of one point from {policy name: throughput} (higher is faster): key `policy`,
    the adaptive policy over the best baseline; for each baseline B, key (B, B) B over the best
    of the other baselines and key (B, policy) the adaptive policy over that same best. None
    where `policy` or two baselines are missing."""
    baselines = {p: t for p, t in by_policy.items() if p != policy}
    if policy not in by_policy or len(baselines) < 2:
        return None
    ratios = {policy: by_policy[policy] / max(baselines.values())}
    for name, value in baselines.items():
        best_other = max(t for p, t in baselines.items() if p != name)
        ratios[(name, name)] = value / best_other
        ratios[(name, policy)] = by_policy[policy] / best_other
    return ratios


def lacking(policies, policy):
    """Why keyed_ratios gives nothing for a point (or round) of `policies`."""
    if policy not in policies:
        return f"no {policy}"
    return f"{len(policies) - 1} baseline(s) only"


def point_ratios(rows, policy, from_context):
    """({(batch, context): keyed_ratios of the point's tokens/s}, [((batch, context), why)]) for
    one grid, its repeats merged; the points lacking `policy` or two baselines are the second,
    left out."""
    tokens = defaultdict(dict)
    for r in bench_report.merge_repeats(rows):  # bench_report.load refused tokens/s <= 0
        if r["context"] >= from_context:
            tokens[(r["batch"], r["context"])][r["policy"]] = r["tokens_per_s"]
    ratios, left_out = {}, []
    for point, by_policy in sorted(tokens.items()):
        keyed = keyed_ratios(by_policy, policy)
        if keyed is None:
            left_out.append((point, lacking(by_policy, policy)))
        else:
            ratios[point] = keyed
    return ratios, left_out


def paired_round_ratios(steps_path, policy, from_context):
    """({(batch, context): [((run, round, turn), keyed_ratios, {policy: its throughput})]}, {why
    (LACKING, PARTIAL, NO_COMMON): [((batch, context), (run, round, turn) or None, detail)]}) from a
    grid's steps CSV, or None where it has no round column. Within a round (a turn of it, where the
    bench ran several: wscope bench --turns) every policy decodes the same step indices, and the
    i-th step routes its tokens to the same experts under each; each policy's throughput is the
    batch over its geometric-mean step over the step indices every policy of the round ran, so a
    ratio is the geometric mean of the step-by-step ratios, the routing's spread left out. Steps
    whose time is not finite and positive are left out. The runs (bench_plot.RunRounds) keep apart
    the repeats of a grid whose benches each numbered their rounds from 0 (bench-grid.sh without
    --one-runtime). A round counts only with every policy the steps CSV has at its point (a round a
    policy failed or was cut in would compare the others with fewer baselines); the second value
    holds what was left out, by why: such rounds, rounds without a step every policy ran, and points
    (round None) lacking `policy` or two baselines."""
    # (point, (run, round, turn)) -> policy -> step index -> ms
    steps = defaultdict(lambda: defaultdict(dict))
    kinds = defaultdict(dict)  # (point, (run, round, turn)) -> step index -> the policy's kind
    runs = RunRounds()
    with bench_report.open_text(steps_path) as f:
        reader = csv.DictReader(f)
        needed = ("policy", "round", "step", "step_ms", "batch", "context")
        if any(c not in (reader.fieldnames or []) for c in needed):
            return None
        has_kinds = all(c in reader.fieldnames for c in ("explore", "read_cpu_share"))
        for line, row in enumerate(reader, start=2):
            try:
                key = runs.step(steps_path, line, row)
                point = (int(row["batch"]), int(row["context"]))
                ms = float(row["step_ms"])
                step = int(row["step"])
            except (ValueError, InputError) as e:
                raise SystemExit(f"best_baseline_report.py: {steps_path}:{line}: {e}")
            if point[1] < from_context:
                continue
            by_step = steps[(point, key)][row["policy"]]  # the policy ran the round
            if math.isfinite(ms) and ms > 0:
                by_step[step] = ms
                if has_kinds and row["policy"] == policy:
                    try:
                        kinds[(point, key)][step] = step_kind(row)
                    except ValueError as e:
                        raise SystemExit(f"best_baseline_report.py: {steps_path}:{line}: {e}")
    policies_at = defaultdict(set)  # point -> every policy the CSV has there
    for (point, _), by_policy in steps.items():
        policies_at[point].update(by_policy)
    paired, left_out = defaultdict(list), defaultdict(list)
    for (point, rnd), by_policy in sorted(steps.items()):
        if keyed_ratios(dict.fromkeys(policies_at[point], 1.0), policy) is None:
            entry = (point, None, lacking(policies_at[point], policy))
            if entry not in left_out[LACKING]:
                left_out[LACKING].append(entry)
            continue
        missing = sorted(policies_at[point] - set(by_policy))
        if missing:
            left_out[PARTIAL].append((point, rnd, "no " + ", ".join(missing)))
            continue
        common = set.intersection(*(set(s) for s in by_policy.values()))
        if not common:
            left_out[NO_COMMON].append((point, rnd, None))
            continue
        speed = {p: 1.0 / geometric_mean([s[i] for i in common]) for p, s in by_policy.items()}
        detail = ({p: {i: s[i] for i in common} for p, s in by_policy.items()},
                  {i: kinds[(point, rnd)][i] for i in common} if has_kinds else None)
        paired[point].append((rnd, keyed_ratios(speed, policy), speed, detail))
    return paired, left_out


# The kinds of the adaptive policy's steps (the steps CSV's explore and read_cpu_share).
EXPLORING, SPLIT, GPU_ONLY = "exploring", "split", "GPU-only"


def step_kind(row):
    """EXPLORING where the step explored the mode the prediction did not pick, else SPLIT where
    the CPU read some of the host tokens, else GPU_ONLY; ValueError on a malformed value."""
    if row["explore"].strip() not in ("", "0"):
        return EXPLORING
    return SPLIT if float(row["read_cpu_share"]) > 0 else GPU_ONLY


# Why a paired point or point-round was left out (paired_round_ratios).
LACKING = "point(s) without the adaptive policy and two baselines"
PARTIAL = ("point-round(s) without every policy of their point (a policy failed there, or the "
           "time ran out before it)")
NO_COMMON = "point-round(s) without a step every policy ran in a finite time"


def left_out_line(kind, entries):
    """ "  left out: N KIND: LABEL B x C ROUND (DETAIL), ..." for [(the grid's label, point,
    round key or None, detail or None)]."""
    cells = []
    for label, (batch, context), rnd, detail in entries:
        cells.append(f"{label} {batch} x {context}" + (f" {round_label(rnd)}" if rnd else "")
                     + (f" ({detail})" if detail else ""))
    return f"  left out: {len(entries)} {kind}: " + ", ".join(cells)


def label_of(path):
    name = os.path.basename(path)
    if name.startswith("bench-"):
        name = name[len("bench-"):]
    return name[:-len(".csv")] if name.endswith(".csv") else name


# Student's t distribution's 0.975 quantile by degrees of freedom (a two-sided 95 % interval);
# between tabled values, and beyond the last, the next smaller degrees of freedom (the wider
# interval).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
        17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
        25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000,
        120: 1.980}


def t975(df):
    return T975[max(d for d in T975 if d <= df)]


def mean_interval(values):
    """(mean, low, high) of values: the 95 % interval of their mean (Student's t); low and
    high None for fewer than two values."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def interval(ratios):
    """(geometric mean, low, high, spread) of ratios: the 95 % interval of their mean log
    (mean_interval of the logs, the ratios taken as independent), spread the logs' standard
    deviation; None for fewer than two ratios."""
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    mean, low, high = mean_interval(logs)
    return math.exp(mean), math.exp(low), math.exp(high), statistics.stdev(logs)


BELOW, NOT_BELOW, UNDECIDED, ONE_ROUND = "below", "not below", "cannot tell", "one round"


def verdict(found, threshold):
    """BELOW where the whole interval is below threshold, NOT_BELOW where none of it is,
    UNDECIDED between, ONE_ROUND without an interval."""
    if found is None:
        return ONE_ROUND
    _, low, high, _ = found
    if high < threshold:
        return BELOW
    return NOT_BELOW if low >= threshold else UNDECIDED


def rounds_to_decide(found, threshold):
    """The fewest rounds whose interval, at the same geometric mean and spread, would leave
    threshold outside it; None where the mean is the threshold or the spread is 0."""
    mean, _, _, spread = found
    gap = abs(math.log(mean) - math.log(threshold))
    if gap == 0 or spread == 0:
        return None
    n = 2
    while t975(n - 1) * spread / math.sqrt(n) >= gap:
        n += 1
        if n > 100000:
            return None
    return n


def against_fixed_best(speeds, name, baselines):
    """name's throughput over the one baseline of `baselines` with the highest geometric-mean
    throughput over the rounds `speeds` ([{policy: throughput}]): (that baseline, the rounds'
    ratios)."""
    best = max(sorted(baselines), key=lambda b: geometric_mean([s[b] for s in speeds]))
    return best, [s[name] / s[best] for s in speeds]


def gap_by_kind(details, policy, best):
    """Where policy's time beyond best's went over the rounds' paired steps (`details`: each
    round's ({policy: {step: ms}} over its common steps, {step: the policy's kind} or None)):
    {kind: ([each round's extra ms over its steps of that kind, over best's ms of all its
    steps], steps, extra ms)} for EXPLORING, SPLIT and GPU_ONLY; None where a round has no
    kinds."""
    gap = {kind: ([], 0, 0.0) for kind in (EXPLORING, SPLIT, GPU_ONLY)}
    for ms, kinds in details:
        if kinds is None:
            return None
        base = sum(ms[best].values())
        for kind, (shares, steps, extra) in gap.items():
            mine = [i for i, k in kinds.items() if k == kind]
            over = sum(ms[policy][i] - ms[best][i] for i in mine)
            shares.append(over / base)
            gap[kind] = (shares, steps + len(mine), extra + over)
    return gap


def gap_line(gap, best):
    """ "    time over BEST's, by its steps: KIND +x.x % [lo, hi] (n steps, +y.yy ms each) (or
    KIND none), ...; all +z.z % [lo, hi]" from gap_by_kind."""
    def share(values):
        mean, low, high = mean_interval(values)
        text = f"{100 * mean:+.1f} %"
        return text + (f" [{100 * low:+.1f}, {100 * high:+.1f}]" if low is not None else "")
    cells = []
    for kind, (shares, steps, extra) in gap.items():
        cells.append(f"{kind} {share(shares)} ({steps} steps, {extra / steps:+.2f} ms each)"
                     if steps else f"{kind} none")
    rounds = zip(*(shares for shares, _, _ in gap.values()))
    return (f"    time over {best}'s, by its steps (share of {best}'s, 95 % interval): "
            + ", ".join(cells) + f"; all {share([sum(r) for r in rounds])}")


def print_intervals(paired_speeds, policy, threshold, paired_details=None):
    """Per point, policy over the point's best baseline (one baseline for all its rounds, the
    fastest by their geometric mean), with a 95 % interval over the rounds: below threshold,
    not below it, or cannot tell, and (from paired_details: the rounds' step details, as
    gap_by_kind reads them) where its time beyond that baseline's went; then the counts, and
    the same count for each baseline B against the best of the baselines other than B."""
    if not paired_speeds:
        return
    print(f"\nAgainst one best baseline per point (the baseline fastest over the point's paired "
          f"rounds), with a 95 % interval over the rounds (Student's t of the rounds' log "
          f"ratios): {policy} below {threshold:g} (the whole interval below it), not below (none "
          "of it below), or cannot tell (and about how many rounds at the same mean and spread "
          "would tell):")
    counts = defaultdict(lambda: defaultdict(int))  # name -> verdict -> points
    for (label, batch, context), speeds in sorted(paired_speeds.items()):
        names = set.intersection(*(set(s) for s in speeds))
        baselines = names - {policy}
        best, ratios = against_fixed_best(speeds, policy, baselines)
        found = interval(ratios)
        said = verdict(found, threshold)
        counts[policy][said] += 1
        line = f"  {label:<14} batch {batch:3d} context {context:6d}: over {best:<13} "
        if found is None:
            line += f"{ratios[0]:.3f} ({ONE_ROUND})"
        else:
            line += (f"{found[0]:.3f} [{found[1]:.3f}, {found[2]:.3f}] over {len(ratios)} "
                     f"rounds: {said}")
            if said == UNDECIDED:
                needed = rounds_to_decide(found, threshold)
                line += f" (~{needed} rounds)" if needed else ""
        print(line)
        gap = gap_by_kind(paired_details[(label, batch, context)], policy, best) \
            if paired_details else None
        if gap is not None:
            print(gap_line(gap, best))
        for name in sorted(baselines):  # two baselines or more: paired_round_ratios
            others = baselines - {name}
            counts[name][verdict(interval(against_fixed_best(speeds, name, others)[1]),
                                 threshold)] += 1

    def tally(name):
        return ", ".join(f"{said} at {counts[name][said]}"
                         for said in (BELOW, NOT_BELOW, UNDECIDED, ONE_ROUND)
                         if counts[name][said] or said != ONE_ROUND)

    print(f"{policy} over the point's best baseline, of {sum(counts[policy].values())} points: "
          + tally(policy))
    print("Each baseline B over the best of the baselines other than B, the same way:")
    for name in sorted(n for n in counts if n != policy):
        print(f"  B = {name:<14} {tally(name)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+")
    parser.add_argument("--threshold", type=float, default=0.98)
    parser.add_argument("--policy", default="writescope", help="the adaptive policy")
    parser.add_argument("--from-context", type=int, default=0,
                        help="only the points at contexts of at least this many tokens")
    args = parser.parse_args()
    if not args.threshold > 0:
        parser.error(f"--threshold must be above 0, not {args.threshold}")

    rows_by_path = {}
    for path in args.csv:
        if not os.path.isfile(path):
            raise SystemExit(f"best_baseline_report.py: no file {path}")
        rows_by_path[path] = bench_report.load(path)
    note = bench_report.alike_rows_note(rows_by_path)
    if note:
        print(note)
    per_point = defaultdict(list)  # (label, batch, context) -> the adaptive policy's ratios
    per_key = defaultdict(list)  # point_ratios' key -> every ratio of the point-runs
    lacking_points = []  # (label, point, None, why) of the points left out
    for path, rows in rows_by_path.items():
        ratios, left_out = point_ratios(rows, args.policy, args.from_context)
        lacking_points += [(label_of(path), point, None, why) for point, why in left_out]
        for (batch, context), by_name in ratios.items():
            per_point[(label_of(path), batch, context)].append(by_name[args.policy])
            for key, ratio in by_name.items():
                per_key[key].append(ratio)
    if not per_point:
        raise SystemExit(f"best_baseline_report.py: no point with {args.policy} and two "
                         "baselines in " + ", ".join(args.csv))

    print(f"{args.policy} over the best baseline, per point (geometric mean over the grids, "
          "least, largest):")
    for (label, batch, context), values in sorted(per_point.items()):
        print(f"  {label:<14} batch {batch:3d} context {context:6d}: {geometric_mean(values):.3f}"
              f" over {len(values)} grid(s), {min(values):.3f}-{max(values):.3f}")
    if lacking_points:
        print(left_out_line(LACKING.replace("the adaptive policy", args.policy), lacking_points))
    def summary(values):
        below = sum(v < args.threshold for v in values)
        return f"{geometric_mean(values):.3f}, {below:3d} of {len(values):3d} below {args.threshold:g}"

    print(f"{args.policy} over the best baseline, every point-run: {summary(per_key[args.policy])}")
    def against_each_baseline(keyed_values):
        print(f"Each baseline B and {args.policy} over the best of the baselines other than B:")
        for name in sorted(k[0] for k in keyed_values if isinstance(k, tuple) and k[1] == k[0]):
            print(f"  B = {name:<14} B {summary(keyed_values[(name, name)])};  {args.policy} "
                  f"{summary(keyed_values[(name, args.policy)])}")
    against_each_baseline(per_key)

    # The same, step by step within each round, from the steps CSV beside each grid.
    paired_point = defaultdict(list)  # (label, batch, context) -> the rounds' ratios
    paired_key = defaultdict(list)
    paired_speeds = defaultdict(list)  # (label, batch, context) -> the rounds' {policy: speed}
    paired_details = defaultdict(list)  # (label, batch, context) -> the rounds' step details
    unpaired = []
    left_out = defaultdict(list)  # why -> [(label, point, round key or None, detail)]
    for path in args.csv:
        steps_path = bench_report.steps_path_beside(path)
        found = paired_round_ratios(steps_path, args.policy, args.from_context) \
            if steps_path else None
        if found is None:
            unpaired.append(path)
            continue
        paired, left = found
        for why, entries in left.items():
            left_out[why] += [(label_of(path), *entry) for entry in entries]
        for (batch, context), rounds in paired.items():
            paired_speeds[(label_of(path), batch, context)] += [speed for _, _, speed, _ in rounds]
            paired_details[(label_of(path), batch, context)] += [d for _, _, _, d in rounds]
            for _, keyed, _, _ in rounds:
                paired_point[(label_of(path), batch, context)].append(keyed[args.policy])
                for key, ratio in keyed.items():
                    paired_key[key].append(ratio)
    if not paired_point and not left_out:
        return
    print(f"\nPaired step by step within each round (the steps CSV beside each grid: the i-th "
          "step of a round routes alike under every policy, so each policy's geometric-mean "
          f"step over the same steps leaves the routing's spread out). {args.policy} over the "
          "best baseline, per point, round by round:")
    lines = [left_out_line(why.replace("the adaptive policy", args.policy), left_out[why])
             for why in (PARTIAL, NO_COMMON, LACKING) if left_out[why]]
    if not paired_point:
        for line in lines + ["  (no point-round left to pair)"]:
            print(line)
        return
    every_round = []
    for (label, batch, context), values in sorted(paired_point.items()):
        below = sum(v < args.threshold for v in values)
        if below == len(values):
            every_round.append(f"{label} {batch} x {context}")
        print(f"  {label:<14} batch {batch:3d} context {context:6d}: "
              + " ".join(f"{v:.3f}" for v in values)
              + f"; geometric mean {geometric_mean(values):.3f}, below {args.threshold:g} in "
              f"{below} of {len(values)} rounds")
    for line in lines:
        print(line)
    print(f"{args.policy} over the best baseline, paired, every point-round: "
          f"{summary(paired_key[args.policy])}")
    print(f"Points below {args.threshold:g} in every round: {len(every_round)} of "
          f"{len(paired_point)}" + (": " + ", ".join(every_round) if every_round else ""))
    against_each_baseline(paired_key)
    print_intervals(paired_speeds, args.policy, args.threshold, paired_details)
    if unpaired:
        print("No steps CSV with rounds beside " + ", ".join(unpaired) + ": not paired")


if __name__ == "__main__":
    main()
