#!/usr/bin/env python3
"""Session 53: writescope's GPU-only decode steps against transfer-all's, from the steps CSVs
that runs 250-256 kept (docs/runs/h100-run25*/g*/*/steps-deepseek_v2.csv.gz). Per run and
batch, over the (round, turn, batch, context) groups where both policies ran:
  - writescope's steps by kind: GPU-only after a GPU-only step, GPU-only after a split step,
    split, exploring; for each, how many missed the KV rounds queued early for them
    (early_rounds_missed > 0);
  - each GPU-only step's time less the median of transfer-all's steps of the same group:
    median and mean, steady (no missed round, after a GPU-only step) and all;
  - the steps more than 1 ms over that median (the host's slow steps), both policies.

    python3 docs/notes/analysis/gpu_only_steps.py STEPS_CSV.gz [...]
"""
import collections
import csv
import gzip
import statistics as st
import sys


def groups(path):
    by = collections.defaultdict(list)
    for r in csv.DictReader(gzip.open(path, "rt")):
        by[(r["round"], r.get("turn", "0"), r["batch"], r["context"], r["policy"])].append(r)
    return by


def main(paths):
    kinds = collections.defaultdict(collections.Counter)
    over = collections.defaultdict(list)
    for path in paths:
        by = groups(path)
        for (rnd, turn, batch, ctx, policy), rows in by.items():
            ta = by.get((rnd, turn, batch, ctx, "transfer-all"))
            if not ta or policy not in ("writescope", "transfer-all"):
                continue
            ta_median = st.median(float(r["step_ms"]) for r in ta)
            prev = None
            for r in rows:
                missed = int(r["early_rounds_missed"]) > 0
                excess = float(r["step_ms"]) - ta_median
                if policy == "transfer-all":
                    kind = "transfer-all"
                    over[(batch, "transfer-all", "all")].append(excess)
                elif r["explore"] != "0":
                    kind = "exploring"
                elif float(r["read_cpu_share"]) > 0:
                    kind = "split"
                else:
                    after_split = prev is not None and float(prev["read_cpu_share"]) > 0
                    kind = "GPU-only after a split step" if after_split else "GPU-only"
                    over[(batch, "writescope GPU-only", "all")].append(excess)
                    if not missed and not after_split:
                        over[(batch, "writescope GPU-only", "steady")].append(excess)
                kinds[(batch, kind)]["steps"] += 1
                kinds[(batch, kind)]["missed"] += missed
                prev = r
    for (batch, kind), c in sorted(kinds.items()):
        print(f"batch {batch:>2} {kind:<28} steps {c['steps']:5d}  missed early rounds "
              f"{c['missed']:4d} ({100 * c['missed'] / c['steps']:.1f} %)")
    for (batch, who, which), v in sorted(over.items()):
        slow = sum(1 for x in v if x > 1.0)
        print(f"batch {batch:>2} {who:<20} {which:<6} n {len(v):5d}  over transfer-all's median: "
              f"median {st.median(v):+.3f} ms, mean {st.mean(v):+.3f} ms; > 1 ms: {slow} "
              f"({100 * slow / len(v):.1f} %)")


if __name__ == "__main__":
    main(sys.argv[1:])
