#!/usr/bin/env python3
"""Writescope's read modes per bench point, from the step CSV of `wscope bench --steps_csv`
(bench-grid.sh's steps-ARCH.csv): for each measured window of the policy, in the file's order,

  - its modes as one line, a letter per step: 's' split (the CPU attended some host tokens),
    'g' GPU-only, each exploring step preceded by 'E';
  - the steps and the median step time of each mode, the steps that explored and the step of
    the first exploration;
  - the changes of mode outside explorations (a step that did not explore reading in another
    mode than the last such step before it: the flips a hold of the mode saves) and, where the
    CSV has `early_rounds_missed`, the steps whose early KV rounds the gpu_worker could not
    use whole, and the explorations whose last step missed them: that step settled, as
    their first one (a change of mode) did, so they measured nothing (Qwen3 16 x 8K's
    warm-up in run 161 kept the split out of the point that way); and, where there are any,
    the steps that did not explore and read GPU-only
    though their own prediction put the split shorter: a mode hold's few, or a split that
    read nothing (run 115's DeepSeek 4 x 32K: 47 of 48, the split's share rounding to no whole
    sequence before build L);
  - at its first step, the two predictions the choice was made by and, where the CSV has them
    (`rest_split_ms`, `rest_gpu_only_ms`), the rests inside them: what a mode predicted far
    from what it measured later usually shows there.

  - last, where the CSV has `explore_cost_ms` (what an exploration was predicted to cost and
    the credit paid, on its first step), per point and explored mode: the explorations, what
    they paid each and what they spent each: their steps' time over the picked mode's
    prediction at their first step (SchedulerOptions::charge_exploration_overrun charges
    the overrun against the picked mode's steps instead, which counts their tail of slow
    steps too).

  - with --warmup (the file of `wscope bench --warmup_steps_csv`, bench-grid.sh's
    warmup-ARCH.csv): the modes of the point's warm-up before it, in the same letters, and
    the rests at the warm-up's first step: how the choice came about at the batch change.

    deploy/modes_report.py STEPS_CSV [--policy writescope] [--warmup WARMUP_CSV]

A window is a run of rows of one (round, turn, batch, context) whose step numbers rise;
repeats of a point are separate windows. The n-th warm-up window of a (round, turn, batch,
context) goes with the n-th measured one (turns after a point's first may have no warm-up:
wscope bench --turn_warmup_steps=0). Standard library only.
"""
import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import InputError, field, print_lines, read_csv, round_of  # noqa: E402

COLUMNS = ("policy", "round", "step", "step_ms", "batch", "context", "read_cpu_share", "explore",
           "predicted_split_ms", "predicted_gpu_only_ms")
RESTS = ("rest_split_ms", "rest_gpu_only_ms")


def maybe_float(path, line, row, name):
    """A value that may be NaN (no prediction or no rest yet); None when the column is absent."""
    return field(path, line, row, name, finite=False) if name in row else None


def load_windows(path, policy):
    """[((round, turn), batch, context, [step dicts])] for `policy`, in the file's order."""
    windows = []
    for line, row in read_csv(path, COLUMNS):
        if row["policy"].strip() != policy:
            continue
        step = {
            "step": field(path, line, row, "step", int),
            "step_ms": field(path, line, row, "step_ms"),
            "split": field(path, line, row, "read_cpu_share") > 0.0,
            "explore": field(path, line, row, "explore", int) != 0,
        }
        step["missed"] = (field(path, line, row, "early_rounds_missed", int) > 0
                          if "early_rounds_missed" in row else None)
        for name in ("predicted_split_ms", "predicted_gpu_only_ms", "explore_cost_ms") + RESTS:
            step[name] = maybe_float(path, line, row, name)
        key = (round_of(path, line, row), field(path, line, row, "batch", int),
               field(path, line, row, "context", int))
        if not windows or windows[-1][:3] != key or windows[-1][3][-1]["step"] >= step["step"]:
            windows.append((*key, []))
        windows[-1][3].append(step)
    return windows


def ms(value):
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def mode_letters(steps):
    return "".join(("E" if s["explore"] else "") + ("s" if s["split"] else "g") for s in steps)


def rests(step):
    return f"rests {ms(step['rest_split_ms'])} / {ms(step['rest_gpu_only_ms'])} ms"


def counts(steps):
    """(exploring steps, changes of mode outside explorations, steps that missed their early
    rounds or None where the CSV does not say) of one window's steps."""
    chosen = [s["split"] for s in steps if not s["explore"]]
    changes = sum(1 for before, after in zip(chosen, chosen[1:]) if before != after)
    missed = (sum(1 for s in steps if s["missed"]) if steps and steps[0]["missed"] is not None
              else None)
    return sum(1 for s in steps if s["explore"]), changes, missed


def untaught(steps):
    """The explorations (runs of exploring steps in one mode) whose last step missed its early
    rounds; 0 where the CSV does not say."""
    count = 0
    for i, s in enumerate(steps):
        after = steps[i + 1] if i + 1 < len(steps) else None
        ends = after is None or not after["explore"] or after["split"] != s["split"]
        if s["explore"] and ends and s["missed"]:
            count += 1
    return count


def explorations(steps):
    """[(explored the split, paid ms or NaN, spent ms or NaN)] of one window's explorations:
    runs of exploring steps in one mode, a step with a finite explore_cost_ms starting one
    (an exploration's first step carries it). Spent: the steps' time over the picked mode's
    prediction at the first step, once per step."""
    found = []
    for i, s in enumerate(steps):
        if not s["explore"]:
            continue
        cost = s["explore_cost_ms"]
        before = steps[i - 1] if i > 0 else None
        if (before is None or not before["explore"] or before["split"] != s["split"]
                or (cost is not None and not math.isnan(cost))):
            picked = s["predicted_gpu_only_ms" if s["split"] else "predicted_split_ms"]
            found.append([s["split"], math.nan if cost is None else cost, picked, 0.0, 0])
        found[-1][3] += s["step_ms"]
        found[-1][4] += 1
    return [(split, paid, total - n * picked) for split, paid, picked, total, n in found]


def exploration_costs(windows):
    """Lines per point (batch, context) and explored mode: its explorations, what the ones
    with a cost paid each, what the ones with a prediction spent each (explorations())."""
    by_point = {}
    for _, batch, context, steps in windows:
        for split, paid, spent in explorations(steps):
            by_point.setdefault((batch, context, split), []).append((paid, spent))
    lines = []
    for (batch, context, split), found in sorted(by_point.items(), key=lambda kv: (
            kv[0][0], kv[0][1], not kv[0][2])):
        paid = [p for p, _ in found if not math.isnan(p)]
        spent = [s for _, s in found if not math.isnan(s)]
        line = (f"explorations of {'the split' if split else 'GPU-only'} at batch {batch} "
                f"context {context}: {len(found)}")
        line += f", paid {statistics.mean(paid):.2f} ms each ({len(paid)})" if paid else \
            ", none paid"
        if spent:
            line += (f", spent {statistics.mean(spent):.2f} ms each over the picked mode's "
                     f"prediction ({len(spent)})")
        both = [(p, s) for p, s in found if not math.isnan(p) and not math.isnan(s)]
        if both and sum(p for p, _ in both) > 0:
            line += (f"; spent over paid {sum(s for _, s in both) / sum(p for p, _ in both):.2f}"
                     f" where both are known")
        lines.append(line)
    return lines


def describe(window, warmup=None):
    (rnd, turn), batch, context, steps = window
    parts = [f"round {rnd}{f' turn {turn}' if turn else ''} batch {batch} context {context}: "
             f"{len(steps)} steps"]
    if warmup is not None:
        nothing = untaught(warmup[3])
        parts.append(f"warm-up {mode_letters(warmup[3])} (first: {rests(warmup[3][0])}"
                     + (f"; {nothing} exploration(s) taught nothing" if nothing else "") + ") |")
    parts.append(mode_letters(steps))
    for name, split in (("split", True), ("GPU-only", False)):
        times = [s["step_ms"] for s in steps if s["split"] == split]
        if times:
            parts.append(f"{name} {len(times)} (median {statistics.median(times):.2f} ms)")
    explored = [i for i, s in enumerate(steps) if s["explore"]]
    if explored:
        parts.append(f"exploring {len(explored)} (first at step {explored[0]})")
    else:
        parts.append("no exploration")
    _, changes, missed = counts(steps)
    parts.append(f"mode changes {changes}")
    if missed is not None:
        parts.append(f"missed rounds on {missed} steps")
    nothing = untaught(steps)
    if nothing:
        parts.append(f"{nothing} exploration(s) taught nothing (the last step missed its rounds)")
    against = sum(1 for s in steps if not s["explore"] and not s["split"]
                  and s["predicted_split_ms"] < s["predicted_gpu_only_ms"])  # False with NaN
    if against:
        parts.append(f"GPU-only though the split was predicted shorter on {against} steps")
    first = steps[0]
    prediction = (f"first step predicted split {ms(first['predicted_split_ms'])} / GPU-only "
                  f"{ms(first['predicted_gpu_only_ms'])} ms")
    if first["rest_split_ms"] is not None:
        prediction += ", " + rests(first)
    parts.append(prediction)
    return "  ".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps_csv")
    parser.add_argument("--policy", default="writescope")
    parser.add_argument("--warmup", metavar="WARMUP_CSV",
                        help="the warm-up steps (wscope bench --warmup_steps_csv)")
    args = parser.parse_args(argv)
    try:
        windows = load_windows(args.steps_csv, args.policy)
        warmups = load_windows(args.warmup, args.policy) if args.warmup else []
    except InputError as e:
        print(f"modes_report.py: {e}", file=sys.stderr)
        return 2
    if not windows:
        print(f"modes_report.py: {args.steps_csv}: no steps of policy {args.policy}",
              file=sys.stderr)
        return 2
    # The n-th warm-up of a point with the n-th measured window of it.
    queued = {}
    for warmup in warmups:
        queued.setdefault(warmup[:3], []).append(warmup)
    lines = []
    for window in windows:
        matches = queued.get(window[:3], [])
        lines.append(describe(window, matches.pop(0) if matches else None))
    if any(s["explore_cost_ms"] is not None for w in windows for s in w[3]):
        lines += exploration_costs(windows)
    print_lines(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
