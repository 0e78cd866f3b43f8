#!/usr/bin/env python3
"""Writescope over transfer-all per steps CSV and pooled per arm (the directory's name up to
its digit: on, off), by deploy/best_baseline_report.py's method: per (round, turn), the
geometric mean of the step-by-step ratios over the step indices both ran; over the rounds,
the geometric mean with the 95 % t interval of the logs (its `interval`). That tool wants two
baselines; runs 271-272 ran one. Run from the repository root:
  python3 docs/runs/h100-run271-median-ab/paired_ratio.py docs/runs/h100-run271-median-ab/*/steps-*.csv.gz
"""
import collections
import csv
import gzip
import importlib.util
import math
import os
import statistics
import sys

sys.dont_write_bytecode = True
spec = importlib.util.spec_from_file_location("bb", "deploy/best_baseline_report.py")
bb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bb)


def round_ratios(path, policy="writescope", baseline="transfer-all"):
    steps = collections.defaultdict(lambda: collections.defaultdict(dict))
    with gzip.open(path, "rt") as f:
        for r in csv.DictReader(f):
            t = float(r["step_ms"])
            if t > 0 and math.isfinite(t):
                steps[(r["round"], r["turn"])][r["policy"]][int(r["step"])] = t
    out = []
    for by in steps.values():
        common = set(by.get(policy, {})) & set(by.get(baseline, {}))
        if common:
            out.append(math.exp(statistics.fmean(
                math.log(by[baseline][i] / by[policy][i]) for i in common)))
    return out


pooled = collections.defaultdict(list)
for path in sys.argv[1:]:
    ratios = round_ratios(path)
    arm = os.path.basename(os.path.dirname(path)).rstrip("0123456789")
    pooled[arm] += ratios
    g, lo, hi, _ = bb.interval(ratios)
    print(f"{path}: writescope over transfer-all {g:.4f} [{lo:.4f}, {hi:.4f}], {len(ratios)} rounds")
for arm, ratios in sorted(pooled.items()):
    g, lo, hi, _ = bb.interval(ratios)
    print(f"pooled {arm}: {g:.4f} [{lo:.4f}, {hi:.4f}], {len(ratios)} rounds")
