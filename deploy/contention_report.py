#!/usr/bin/env python3
"""Summarizes deploy/contention.sh's CSVs: per policy, the step times before, during and after
the competing load (contention.sh --cycles: every load of the trio), and for writescope (the
policy that chooses its reads step by step) the steps by kind: a mode switch (it read
otherwise than the step before), the same mode, an exploration, and the step after an
exploration.

    deploy/contention_report.py STEPS_CSV EVENTS_CSV [--settle SECONDS] [--warmup CSV]

The first `--settle` seconds (default 3) after a load starts and after it ends count in no
phase: the shares move there. With several loads (contention.sh --cycles), "during" is any
load's time and "after" any time after a load's end before the next load starts. Step kinds
compare steps of one bench round only (each round places its context anew, so its first step
has no step before it). A mode is "split" when the CPU attended some of the host tokens
(read_cpu_share > 0), else "GPU-only". Where the CSV has the re-split columns (resplit_ms,
resplit_blocks: the monolithic policy moving its placed blocks to a new target), the policies
that moved blocks get a line with their copies' steps, blocks and time against all their steps'
time, every step counted. For the policies that explore, the reaction to each load: when, after
it started, the first step read GPU-only by choice (not exploring), when, after it ended, the
first step read split by choice again (before the next load started), and when the split was
first explored after it and, where the CSV says (explore_reason), what started that
exploration; with the warm-up steps (--warmup: contention.sh's contention-warmup.csv) in the
timeline where given, as they run decisions too. Where the CSV has the read modes' rests
(rest_split_ms, rest_gpu_only_ms: what the scheduler holds beyond its attention lines), each
load's rests too: their medians over the --settle seconds before the load and over its last
--settle seconds, and how many times GPU-only's rise the split's was (a CPU load raises the
split's more: SchedulerOptions::rest_shift_split_gap_share). Standard library only.
"""
import argparse
import math
import os
import statistics
import sys

# The CSV readers of the bench charts (line-numbered errors for a bad file or value).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import (InputError, field, load_events as read_events, read_csv,  # noqa: E402
                        round_of)

PHASES = ("before", "during", "after")
KINDS = ("switch", "same", "explore", "after explore")


STEP_COLUMNS = ("policy", "round", "unix_s", "step_ms", "read_cpu_share", "explore")
RESPLIT_COLUMNS = ("resplit_ms", "resplit_blocks")  # optional (CSVs from session 37 on)
REASON_COLUMN = "explore_reason"  # optional (CSVs from session 42 on): what started one
REST_COLUMNS = ("rest_split_ms", "rest_gpu_only_ms")  # optional: writescope's rests (NaN
# until a mode was measured)


def load_events(path):
    """{policy: {event: [unix seconds, in time order]}}."""
    events = {}
    for e in read_events(path):
        events.setdefault(e["policy"], {}).setdefault(e["event"], []).append(e["unix_s"])
    for by_event in events.values():
        for times in by_event.values():
            times.sort()
    return events


def load_windows(events, policy):
    """[(start, end, the next load's start or +inf)] of the policy's loads in time order;
    ValueError unless every load start has its end after it and before the next start."""
    by_event = events.get(policy, {})
    starts, ends = by_event.get("load start", []), by_event.get("load end", [])
    if not starts or not ends:
        raise ValueError(f"no load start and end for {policy} in the events")
    if len(starts) != len(ends):
        raise ValueError(f"{policy}: {len(starts)} load starts against {len(ends)} ends")
    windows = list(zip(starts, ends, starts[1:] + [float("inf")]))
    for i, (start, end, following) in enumerate(windows):
        if end < start or following < end:
            raise ValueError(f"{policy}: load {i + 1} ends at {end} before it starts or after "
                             "the next starts")
    return windows


def load_steps(path):
    steps = []
    for line, row in read_csv(path, STEP_COLUMNS):
        step = {"policy": (row.get("policy") or "").strip()}
        for name in STEP_COLUMNS[1:]:
            step[name] = field(path, line, row, name)
        for name in RESPLIT_COLUMNS:
            step[name] = field(path, line, row, name) if (row.get(name) or "").strip() else 0.0
        step[REASON_COLUMN] = (row.get(REASON_COLUMN) or "").strip()
        for name in REST_COLUMNS:
            text = (row.get(name) or "").strip()
            step[name] = field(path, line, row, name, finite=False) if text else float("nan")
        step["round"] = round_of(path, line, row)  # (round, turn)
        steps.append(step)
    return steps


def phase_of(t, windows, settle):
    """The phase of time t among the loads' windows (load_windows), None while settling."""
    if t < windows[0][0]:
        return "before"
    for start, end, following in windows:
        if t >= following:
            continue
        if t < start + settle:
            return None
        if t < end:
            return "during"
        if t < end + settle:
            return None
        return "after"
    return None  # not reached: t >= the first start lies in some window's span


def cell(values):
    if not values:
        return "n   0" + " " * 14
    return f"n {len(values):3d} med {statistics.median(values):6.1f}    "


def summarize(steps, events, settle):
    """Returns {policy: {"phase": {phase: [ms]}, "explore": {phase: count},
    "kind": {phase: {kind: [ms]}}, "resplit": {"steps", "blocks", "ms", "step_ms"}}}, the
    re-splits over every step (settling ones too) with all the steps' time."""
    out = {}
    by_policy = {}
    for row in steps:
        by_policy.setdefault(row["policy"], []).append(row)
    for policy, rows in by_policy.items():
        windows = load_windows(events, policy)
        summary = {"phase": {p: [] for p in PHASES}, "explore": {p: 0 for p in PHASES},
                   "kind": {p: {k: [] for k in KINDS} for p in PHASES},
                   "resplit": {"steps": 0, "blocks": 0, "ms": 0.0, "step_ms": 0.0}}
        previous = None
        for row in rows:
            resplit = summary["resplit"]
            resplit["step_ms"] += row["step_ms"]
            if row["resplit_blocks"] > 0:
                resplit["steps"] += 1
                resplit["blocks"] += int(row["resplit_blocks"])
                resplit["ms"] += row["resplit_ms"]
            phase = phase_of(row["unix_s"], windows, settle)
            ms = row["step_ms"]
            explore = row["explore"] != 0
            if phase is not None:
                summary["phase"][phase].append(ms)
                summary["explore"][phase] += explore
                if previous is not None and previous["round"] == row["round"]:
                    if explore:
                        kind = "explore"
                    elif previous["explore"] != 0:
                        kind = "after explore"
                    else:
                        split = row["read_cpu_share"] > 0
                        was_split = previous["read_cpu_share"] > 0
                        kind = "switch" if split != was_split else "same"
                    summary["kind"][phase][kind].append(ms)
            previous = row
        out[policy] = summary
    return out


def reaction(steps, events):
    """{policy: [(seconds from a load's start to its first GPU-only step by choice within the
    load, or None; seconds from the load's end to the first split step by choice after it and
    before the next load starts, or None; (seconds from the load's end to the first split
    exploration after it, before the next load, what started it: "" where the CSV does not
    say) or None)] per load} for the policies with explorations, over `steps` in time order.
    A load whose last step by choice before its end read split gets 0.0 for the second."""
    out = {}
    by_policy = {}
    for row in sorted(steps, key=lambda r: r["unix_s"]):
        by_policy.setdefault(row["policy"], []).append(row)
    for policy, rows in by_policy.items():
        if not any(r["explore"] != 0 for r in rows) or policy not in events:
            continue
        windows = load_windows(events, policy)
        chosen = [r for r in rows if r["explore"] == 0]
        out[policy] = []
        for start, end, following in windows:
            to_gpu = next((r["unix_s"] - start for r in chosen
                           if start <= r["unix_s"] < end and r["read_cpu_share"] == 0), None)
            last = [r for r in chosen if r["unix_s"] < end]
            if last and last[-1]["read_cpu_share"] > 0:
                back = 0.0
            else:
                back = next((r["unix_s"] - end for r in chosen
                             if end <= r["unix_s"] < following and r["read_cpu_share"] > 0),
                            None)
            explored = next(((r["unix_s"] - end, r[REASON_COLUMN]) for r in rows
                             if end <= r["unix_s"] < following and r["explore"] != 0 and
                             r["read_cpu_share"] > 0), None)
            out[policy].append((to_gpu, back, explored))
    return out


def rests(steps, events, window):
    """{policy: [(split's rest before, at the end; GPU-only's before, at the end)] per load}:
    the medians of the rests (REST_COLUMNS) over the `window` seconds before each load and
    its last `window` seconds (None where no step there had a finite one), for the policies
    whose steps carry rests."""
    out = {}
    for policy in sorted({r["policy"] for r in steps}):
        rows = [r for r in steps if r["policy"] == policy]
        if policy not in events or not any(
                math.isfinite(r[name]) for r in rows for name in REST_COLUMNS):
            continue

        def median(name, begin, end):
            values = [r[name] for r in rows
                      if begin <= r["unix_s"] < end and math.isfinite(r[name])]
            return statistics.median(values) if values else None

        out[policy] = [tuple(median(name, b, e) for name in REST_COLUMNS
                             for b, e in ((start - window, start), (end - window, end)))
                       for start, end, _ in load_windows(events, policy)]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps")
    parser.add_argument("events")
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--warmup", help="the warm-up steps' CSV (contention-warmup.csv)")
    args = parser.parse_args()
    try:
        steps, events = load_steps(args.steps), load_events(args.events)
        summary = summarize(steps, events, args.settle)
        timeline = steps + (load_steps(args.warmup) if args.warmup else [])
        reactions = reaction(timeline, events)
        rests_by_load = rests(timeline, events, args.settle)
    except (InputError, ValueError) as e:
        print(f"contention_report.py: {e}", file=sys.stderr)
        return 2
    print("Step ms per phase (median, mean, steps, explorations; the first "
          f"{args.settle:g} s after the load starts and ends left out):")
    for policy, s in summary.items():
        cells = []
        for p in PHASES:
            v = s["phase"][p]
            cells.append(f"{p} " + (f"{statistics.median(v):6.1f} {statistics.mean(v):6.1f} "
                                    f"n {len(v):3d} expl {s['explore'][p]:2d}" if v else "none"))
        print(f"  {policy:14s} " + " | ".join(cells))
    for policy, s in summary.items():
        r = s["resplit"]
        if r["steps"] == 0:
            continue
        share = 100.0 * r["ms"] / r["step_ms"] if r["step_ms"] > 0 else 0.0
        print(f"  {policy:14s} re-splits: {r['steps']} steps, {r['blocks']} blocks moved, "
              f"{r['ms']:.1f} ms of copies ({share:.1f} % of its {r['step_ms']:.0f} ms of steps)")
    for policy, s in summary.items():
        if not any(s["explore"].values()):
            continue
        print(f"\n{policy}: steps by kind (median ms), step after step within a round:")
        for p in PHASES:
            print(f"  {p:6s} " + " | ".join(f"{k} {cell(s['kind'][p][k])}" for k in KINDS))
    if reactions:
        steps_note = "measured and warm-up steps" if args.warmup else "measured steps only"
        print(f"\nReaction ({steps_note}; by choice: not exploring):")
    for policy, loads in reactions.items():
        for i, (to_gpu, back, explored) in enumerate(loads):
            first = (f"GPU-only {to_gpu:.2f} s into the load" if to_gpu is not None
                     else "not GPU-only during the load")
            second = (f"split again {back:.2f} s after it" if back is not None
                      else "not split again after it")
            third = ""
            if explored is not None:
                third = f" (the split explored {explored[0]:.2f} s after it"
                third += f": {explored[1]})" if explored[1] else ")"
            which = f" load {i + 1}:" if len(loads) > 1 else ""
            print(f"  {policy:14s}{which} {first}; {second}{third}")
        backs = [back for _, back, _ in loads if back is not None]
        if len(loads) > 1 and backs:
            print(f"  {policy:14s} split again after {len(backs)} of {len(loads)} loads, "
                  f"median {statistics.median(backs):.2f} s, most {max(backs):.2f} s")
    if rests_by_load:
        print(f"\nRests per load (ms, medians over the {args.settle:g} s before the load and its "
              f"last {args.settle:g} s):")
    def show(value):
        return "?" if value is None else f"{value:.1f}"

    for policy, loads in rests_by_load.items():
        for i, (split0, split1, gpu0, gpu1) in enumerate(loads):
            line = (f"  {policy:14s} load {i + 1}: split {show(split0)} -> {show(split1)}, "
                    f"GPU-only {show(gpu0)} -> {show(gpu1)}")
            if None not in (split0, split1, gpu0, gpu1) and gpu1 - gpu0 > 0:
                line += (f"; the split's rise {(split1 - split0) / (gpu1 - gpu0):.2f} times "
                         "GPU-only's")
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
