#!/usr/bin/env python3
"""deploy/mode_cost_report.py on small step CSVs with known answers: writescope's steps by mode,
choice and missed rounds against the baseline's round means (the contributions adding up to
the difference of the means), the steps by how long their mode had run (over the baseline's
round medians, the last k counting k and more), other policies left out, unpaired rounds and
points left out and said so, benches that each numbered their rounds from 0 kept apart,
a CSV without early_rounds_missed, a gzipped one, another baseline, and bad input refused
with exit status 2."""
import gzip
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "mode_cost_report.py")
HEADER = "policy,round,step,step_ms,batch,context,read_cpu_share,explore"


def row(policy, rnd, step, ms, share=0.0, explore=0, missed=None, batch=4, context=8192):
    cells = [policy, str(rnd), str(step), str(ms), str(batch), str(context), str(share),
             str(explore)]
    return ",".join(cells + ([] if missed is None else [str(missed)]))


ROWS = [
    # Round 0: transfer-all 10 ms a step; writescope GPU-only twice, then a split exploration
    # whose first step missed its rounds.
    row("transfer-all", 0, 0, 10.0, missed=0), row("transfer-all", 0, 1, 10.0, missed=0),
    row("transfer-all", 0, 2, 10.0, missed=0), row("transfer-all", 0, 3, 10.0, missed=0),
    row("writescope", 0, 0, 10.0, missed=0), row("writescope", 0, 1, 10.5, missed=0),
    row("writescope", 0, 2, 12.0, 0.1, 1, missed=1), row("writescope", 0, 3, 11.0, 0.1, 1, 0),
    row("cpu-all", 0, 0, 30.0, 1.0, missed=0),
    # Round 1: transfer-all 8, 12, 10, 10 (mean and median 10); writescope splits three steps,
    # then GPU-only.
    row("transfer-all", 1, 0, 8.0, missed=0), row("transfer-all", 1, 1, 12.0, missed=0),
    row("transfer-all", 1, 2, 10.0, missed=0), row("transfer-all", 1, 3, 10.0, missed=0),
    row("writescope", 1, 0, 9.0, 0.2, missed=0), row("writescope", 1, 1, 9.0, 0.2, missed=0),
    row("writescope", 1, 2, 9.0, 0.2, missed=0), row("writescope", 1, 3, 11.0, missed=0),
    # A point writescope ran alone: left out.
    row("writescope", 0, 0, 20.0, batch=16),
]


def write(path, rows, missed=True):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        f.write(HEADER + (",early_rounds_missed" if missed else "") + "\n")
        f.writelines(r + "\n" for r in rows)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def line_of(text, start):
    """The line of `text` that starts (after its indent) with `start`, or ''."""
    return next((l.strip() for l in text.splitlines() if l.strip().startswith(start)), "")


checks = []
outputs = []
with tempfile.TemporaryDirectory() as d:
    csv_path = os.path.join(d, "steps.csv.gz")
    write(csv_path, ROWS)
    r = run(csv_path, "--max-k", "3")
    out = r.stdout
    outputs.append(out + r.stderr)
    checks.append((r.returncode == 0, "exit 0"))
    checks.append(("batch 4 context 8192: 2 round(s), writescope 10.188 ms a step, "
                   "transfer-all 10.000" in out, "the point's means"))
    checks.append(("transfer-all / writescope 0.982)" in out, "the means' ratio"))
    checks.append(("batch 16" not in out and out.rstrip("\n").splitlines()[-1] ==
                   "left out: 1 point(s) without a round of both writescope and transfer-all: "
                   "16 x 8192 (writescope only)", "a point without the baseline left out, said so"))
    checks.append(("cpu-all" not in out, "other policies left out"))
    checks.append((line_of(out, "GPU-only, chosen ").split() == ["GPU-only,", "chosen", "3",
                                                                "0.500", "0.188"],
                   "GPU-only chosen: 3 steps, 0.5 ms over, 0.188 over all"))
    checks.append((line_of(out, "split, exploring, missed rounds").split()[-3:] ==
                   ["1", "2.000", "0.250"], "the exploration's missed step"))
    checks.append((line_of(out, "split, exploring ").split()[-3:] == ["1", "1.000", "0.125"],
                   "the exploration's settled step"))
    checks.append((line_of(out, "split, chosen").split()[-3:] == ["3", "-1.000", "-0.375"],
                   "the chosen splits"))
    checks.append((line_of(out, "all").split() == ["all", "8", "0.188"],
                   "the contributions add up to the difference of the means"))
    checks.append((line_of(out, "GPU-only  k=1") ==
                   "GPU-only  k=1 1.050 (2)  k=2 1.050 (1)  k>=3 -", "GPU-only by k"))
    checks.append((line_of(out, "split     k=1") ==
                   "split     k=1 1.050 (2)  k=2 1.000 (2)  k>=3 0.900 (1)",
                   "split by k, the runs restarting each round"))
    # Without the missed-rounds column: no such category.
    plain = os.path.join(d, "plain.csv")
    write(plain, [",".join(x.split(",")[:8]) for x in ROWS], missed=False)
    r = run(plain)
    outputs.append(r.stdout + r.stderr)
    checks.append((r.returncode == 0 and "missed" not in r.stdout and
                   line_of(r.stdout, "split, exploring").split()[-3:] == ["2", "1.500", "0.375"],
                   "no early_rounds_missed column"))
    checks.append(("k>=5" in r.stdout, "--max-k's default 5"))
    # The same steps as two turns of round 0 (wscope bench --turns): each turn a round of its
    # own, so the same answers.
    turned = os.path.join(d, "turned.csv")
    with open(turned, "w") as f:
        f.write(HEADER + ",early_rounds_missed,turn\n")
        for x in ROWS[:-1]:  # the last has no early_rounds_missed, and is left out anyway
            cells = x.split(",")
            turn, cells[1] = cells[1], "0"
            f.write(",".join(cells + [turn]) + "\n")
    r = run(turned, "--max-k", "3")
    outputs.append(r.stdout + r.stderr)
    checks.append((r.returncode == 0 and r.stdout == out.split("left out: 1 point")[0],
                   "turns of a round paired as rounds"))
    # The same rounds as two benches that each numbered their round 0 (bench-grid.sh without
    # --one-runtime: a bench per policy and repeat, the second in reverse order): the same
    # answers, not one round of both benches' steps.
    benched = os.path.join(d, "benched.csv")
    first = [x for x in ROWS[:-1] if x.split(",")[1] == "0"]
    second = [x.replace(",1,", ",0,", 1) for x in ROWS[:-1] if x.split(",")[1] == "1"]
    second.sort(key=lambda x: x.split(",")[0] != "writescope")  # writescope first
    write(benched, first + second + ROWS[-1:])
    r = run(benched, "--max-k", "3")
    outputs.append(r.stdout + r.stderr)
    checks.append((r.returncode == 0 and r.stdout == out,
                   "benches that restart their rounds paired bench by bench"))
    # Another baseline: cpu-all ran round 0 only.
    r = run(csv_path, "--baseline", "cpu-all")
    outputs.append(r.stdout + r.stderr)
    checks.append((r.returncode == 0 and "1 round(s), writescope 10.875 ms a step, cpu-all "
                   "30.000" in r.stdout, "--baseline"))
    checks.append(("  left out: 1 round(s) without both policies: round 1 (no cpu-all)"
                   in r.stdout, "a round without the baseline left out, said so"))
    # Bad input.
    for args, what in [((os.path.join(d, "none.csv"),), "a missing file"),
                       ((csv_path, "--max-k", "1"), "--max-k 1"),
                       ((csv_path, "--baseline", "writescope"), "the same policy twice"),
                       ((csv_path, "--baseline", "static:0.5"), "no round with both")]:
        r = run(*args)
        outputs.append(r.stderr)
        checks.append((r.returncode == 2 and r.stderr.startswith("mode_cost_report.py:"),
                       f"{what}: exit 2 with a message"))
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as f:
        f.write("policy,round,step\nwritescope,0,0\n")
    r = run(bad)
    outputs.append(r.stderr)
    checks.append((r.returncode == 2 and "missing column" in r.stderr, "a missing column"))
    notnum = os.path.join(d, "notnum.csv")
    write(notnum, ROWS[:4] + [row("writescope", 0, 0, "fast")])
    r = run(notnum)
    outputs.append(r.stderr)
    checks.append((r.returncode == 2 and "step_ms" in r.stderr, "a step time not a number"))

finish(checks, *outputs)
