#!/usr/bin/env python3
"""deploy/best_baseline_report.py on two small grids whose answers are known: the ratios over
the best baseline per point and pooled, the repeats merged as bench_report.py merges them
(harmonic mean), --from-context, each baseline against the others beside writescope against
the same, the same again per round paired step by step from the steps CSV beside a grid, the
intervals against one best baseline and where writescope's time beyond it went by the kind of
its step, and the refusals (no file, no point to compare, a malformed step) without a
traceback."""
import math
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "best_baseline_report.py")
HEADER = "policy,layers,batch,context,steps,tokens_per_s,step_ms\n"


def row(policy, batch, context, tokens_per_s):
    return f"{policy},4,{batch},{context},8,{tokens_per_s},{batch * 1e3 / tokens_per_s}\n"


def write_grid(path, *points):
    """A grid CSV at path: HEADER, then a row per (policy, batch, context, tokens/s)."""
    with open(path, "w") as f:
        f.write(HEADER)
        for point in points:
            f.write(row(*point))


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "one"))
    os.makedirs(os.path.join(tmp, "two"))
    first = os.path.join(tmp, "one", "bench-tiny.csv")
    second = os.path.join(tmp, "two", "bench-tiny.csv")
    write_grid(first,
               # 4 x 8192: writescope 100 against monolithic 110 and static 50.
               ("writescope", 4, 8192, 100), ("monolithic", 4, 8192, 110),
               ("static:0.5", 4, 8192, 50),
               # 16 x 8192, writescope twice: 100 and 300 tokens/s are 150 (the harmonic mean).
               ("writescope", 16, 8192, 100), ("writescope", 16, 8192, 300),
               ("monolithic", 16, 8192, 120), ("static:0.5", 16, 8192, 100),
               # 4 x 2048: left out by --from-context 8192.
               ("writescope", 4, 2048, 1), ("monolithic", 4, 2048, 100),
               ("static:0.5", 4, 2048, 100),
               # 32 x 8192 has one baseline only: left out.
               ("writescope", 32, 8192, 10), ("static:0.5", 32, 8192, 100))
    write_grid(second, ("writescope", 4, 8192, 100), ("monolithic", 4, 8192, 98),
               ("static:0.5", 4, 8192, 60))
    # The steps beside the first grid: two rounds, the step indices' costs 10 and 30 ms (the
    # routing's spread); writescope's third step of round 0 (1000 ms) ran under it alone, and
    # static:0.5's second step of that round is not finite: both left out of the pairing.
    with open(os.path.join(tmp, "one", "steps-tiny.csv"), "w") as f:
        f.write("policy,round,step,unix_s,step_ms,batch,context\n")
        def steps(policy, rnd, batch, context, *ms):
            for i, value in enumerate(ms):
                f.write(f"{policy},{rnd},{i},0,{value},{batch},{context}\n")
        steps("writescope", 0, 4, 8192, 10, 30, 1000)
        steps("monolithic", 0, 4, 8192, 9.5, 28.5)
        steps("static:0.5", 0, 4, 8192, 20, "nan")
        steps("writescope", 1, 4, 8192, 10, 30)
        steps("monolithic", 1, 4, 8192, 10.2, 30.6)
        steps("static:0.5", 1, 4, 8192, 20, 60)
        for rnd, faster in ((0, 0.9), (1, 0.95)):
            steps("writescope", rnd, 16, 8192, 10, 30)
            steps("monolithic", rnd, 16, 8192, 10 * faster, 30 * faster)
            steps("static:0.5", rnd, 16, 8192, 20, 60)
        steps("writescope", 0, 4, 2048, 10, 30)  # left out by --from-context 8192
        steps("monolithic", 0, 4, 2048, 1, 3)
        steps("static:0.5", 0, 4, 2048, 1, 3)
    out = run("--from-context", "8192", first, second)
    text = out.stdout
    paired = [0.95, 1.02, 0.9, 0.95]

    ws = [100 / 110, 100 / 98, 150 / 120]
    geo = math.exp(sum(math.log(v) for v in ws) / 3)
    point_geo = math.sqrt(100 / 110 * 100 / 98)
    # B = monolithic: the reference is static:0.5 alone. B = static:0.5: monolithic alone.
    mono = [110 / 50, 98 / 60, 120 / 100]
    ws_vs_static = [100 / 50, 100 / 60, 150 / 100]
    static = [50 / 110, 60 / 98, 100 / 120]
    ws_vs_mono = [100 / 110, 100 / 98, 150 / 120]
    g = lambda v: math.exp(sum(math.log(x) for x in v) / len(v))
    checks = [
        (out.returncode == 0, "exit 0"),
        (f"tiny           batch   4 context   8192: {point_geo:.3f} over 2 grid(s), "
         f"{100 / 110:.3f}-{100 / 98:.3f}" in text, "the point over both grids"),
        (f"tiny           batch  16 context   8192: {150 / 120:.3f} over 1 grid(s)" in text,
         "repeats merged by the harmonic mean"),
        ("context   2048" not in text, "--from-context leaves 2048 out"),
        ("batch  32" not in text, "a point with one baseline is left out"),
        (f"writescope over the best baseline, every point-run: {geo:.3f},   1 of   3 below 0.98"
         in text, "pooled over the point-runs"),
        (f"B = monolithic     B {g(mono):.3f},   0 of   3 below 0.98;  writescope "
         f"{g(ws_vs_static):.3f},   0 of   3 below 0.98" in text, "monolithic against the others"),
        (f"B = static:0.5     B {g(static):.3f},   3 of   3 below 0.98;  writescope "
         f"{g(ws_vs_mono):.3f},   1 of   3 below 0.98" in text, "static:0.5 against the others"),
        # Greedy grids without experts_per_layer decoded alike rows (before session 35).
        (f"Note: {first}, {second} predate session 35" in text,
         "grids whose greedy rows were alike are named"),
    ]
    paired_text = text[text.find("Paired step by step"):]
    checks += [
        ("tiny           batch   4 context   8192: 0.950 1.020; geometric mean 0.984, below 0.98 "
         "in 1 of 2 rounds" in paired_text, "paired per round, the unpaired steps left out"),
        ("tiny           batch  16 context   8192: 0.900 0.950; geometric mean 0.925, below 0.98 "
         "in 2 of 2 rounds" in paired_text, "a point below in both rounds"),
        ("context   2048" not in paired_text, "--from-context in the pairing"),
        (f"writescope over the best baseline, paired, every point-round: {g(paired):.3f},   3 of"
         "   4 below 0.98" in paired_text, "the point-rounds pooled"),
        ("Points below 0.98 in every round: 1 of 2: tiny 16 x 8192" in paired_text,
         "the points below in every round"),
        # B = monolithic against static:0.5 alone (round 0 at 4 x 8192 over its first step only).
        (f"B = monolithic     B {g([20 / 9.5, 1 / 0.51, 2 / 0.9, 2 / 0.95]):.3f},   0 of   4 "
         "below 0.98"
         in paired_text, "a baseline against the others, paired"),
        (f"No steps CSV with rounds beside {second}: not paired" in paired_text,
         "a grid without steps is named"),
    ]
    # A grid whose bench ran two turns of a round (wscope bench --turns): each turn is paired on
    # its own (its steps are numbered from 0 again), here 0.9 and then 1.05.
    os.makedirs(os.path.join(tmp, "turns"))
    turned = os.path.join(tmp, "turns", "bench-turns.csv")
    write_grid(turned, ("writescope", 4, 8192, 100), ("monolithic", 4, 8192, 100),
               ("static:0.5", 4, 8192, 50))
    with open(os.path.join(tmp, "turns", "steps-turns.csv"), "w") as f:
        f.write("policy,round,step,unix_s,step_ms,batch,context,turn\n")
        for turn, mono in ((0, 0.9), (1, 1.05)):
            for policy, scale in (("writescope", 1), ("monolithic", mono), ("static:0.5", 2)):
                for i, value in enumerate((10, 30)):
                    f.write(f"{policy},0,{i},0,{value * scale},4,8192,{turn}\n")
    turns = run(turned)
    checks.append(("turns          batch   4 context   8192: 0.900 1.050; geometric mean 0.972, "
                   "below 0.98 in 1 of 2 rounds" in turns.stdout,
                   "each turn of a round paired on its own"))
    # A grid of one bench per policy and repeat (bench-grid.sh without --one-runtime): every
    # bench numbers its round 0 and steps 0, 1 alike, so a step that comes again starts the
    # policy-point's next run. At 4 x 8192 monolithic is 0.9 then 1.05 of writescope's
    # time; in a third repeat static:0.5 failed (no rows): that round is left out, not paired
    # against monolithic alone. 4 x 32768: static:0.5's steps are not finite in run 0, and
    # run 1 pairs 1.1; 16 x 8192 has one baseline only.
    os.makedirs(os.path.join(tmp, "repeats"))
    repeated = os.path.join(tmp, "repeats", "bench-repeats.csv")
    write_grid(repeated, *[(p, 4, 8192, t) for p, t in (("writescope", 100), ("monolithic", 100),
                                                         ("static:0.5", 50))] * 2,
               ("writescope", 16, 8192, 100), ("monolithic", 16, 8192, 90))
    with open(os.path.join(tmp, "repeats", "steps-repeats.csv"), "w") as f:
        f.write("policy,round,step,unix_s,step_ms,batch,context\n")
        speeds = {"writescope": (1, 1, 1), "monolithic": (0.9, 1.05, 1), "static:0.5": (2, 2, None)}
        deep = {"writescope": (1, 1), "monolithic": (2, 1.1), "static:0.5": ("nan", 2)}
        for repeat in range(3):
            order = list(speeds) if repeat % 2 == 0 else list(reversed(speeds))
            for policy in order:
                scale = speeds[policy][repeat]
                if scale is None:
                    continue
                for i, value in enumerate((10, 30)):
                    f.write(f"{policy},0,{i},0,{value * scale},4,8192\n")
                    if repeat < 2:
                        f.write(f"{policy},0,{i},0,{value * float(deep[policy][repeat])},4,"
                                "32768\n")
                    if repeat == 0 and policy != "static:0.5":
                        f.write(f"{policy},0,{i},0,{value},16,8192\n")
    runs = run(repeated)
    text += runs.stdout
    checks += [
        (runs.returncode == 0 and "repeats        batch   4 context   8192: 0.900 1.050; "
         "geometric mean 0.972, below 0.98 in 1 of 2 rounds" in runs.stdout,
         "repeats that restart their rounds paired run by run, not overwritten"),
        ("repeats        batch   4 context  32768: 1.100;" in runs.stdout,
         "a round without a finite step of every policy is not paired"),
        ("  left out: 1 point-round(s) without every policy of their point (a policy failed "
         "there, or the time ran out before it): repeats 4 x 8192 run 2 round 0 (no static:0.5)"
         in runs.stdout, "a round without every policy of its point left out, and said so"),
        ("  left out: 1 point-round(s) without a step every policy ran in a finite time: "
         "repeats 4 x 32768 round 0" in runs.stdout, "a round without a common step said so"),
        ("  left out: 1 point(s) without writescope and two baselines: repeats 16 x 8192 "
         "(1 baseline(s) only)" in runs.stdout.split("Paired")[-1],
         "a paired point without two baselines said so"),
        ("  left out: 1 point(s) without writescope and two baselines: repeats 16 x 8192 "
         "(1 baseline(s) only)" in runs.stdout.split("Paired")[0],
         "a merged point without two baselines said so"),
    ]
    checks.append(("  left out: 1 point(s) without writescope and two baselines: tiny 32 x 8192 "
                   "(1 baseline(s) only)" in text.split("Paired")[0],
                   "the first grid's point with one baseline said so"))
    # One best baseline per point with a 95 % interval over the rounds (four turns): at 4 x 8192
    # writescope is 0.90-0.92 of monolithic (below), at 16 x 8192 1.04-1.06 of it (not below),
    # at 32 x 8192 0.95 then 1.02 (cannot tell); static:0.5 is half as fast everywhere, and
    # 4 x 32768 ran one turn only.
    os.makedirs(os.path.join(tmp, "decided"))
    decided = os.path.join(tmp, "decided", "bench-decided.csv")
    cases = {(4, 8192): (0.90, 0.91, 0.92, 0.90), (16, 8192): (1.05, 1.06, 1.04, 1.05),
             (32, 8192): (0.95, 1.02, 0.95, 1.02), (4, 32768): (0.9,)}
    write_grid(decided, *[(p, b, c, 100) for (b, c) in cases
                          for p in ("writescope", "monolithic", "static:0.5")])
    with open(os.path.join(tmp, "decided", "steps-decided.csv"), "w") as f:
        f.write("policy,round,step,unix_s,step_ms,batch,context,turn\n")
        for (batch, context), ratios in cases.items():
            for turn, ratio in enumerate(ratios):
                for policy, scale in (("writescope", 1), ("monolithic", ratio), ("static:0.5", 2)):
                    for i, value in enumerate((10, 30)):
                        f.write(f"{policy},0,{i},0,{value * scale},{batch},{context},{turn}\n")
    intervals = run(decided).stdout
    intervals = intervals[intervals.find("Against one best baseline"):]

    def expected(ratios):  # geometric mean and 95 % interval, t(3) = 3.182
        logs = [math.log(r) for r in ratios]
        mean = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        half = 3.182 * sd / math.sqrt(len(logs))
        return f"{math.exp(mean):.3f} [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}]"
    checks += [
        (f"batch   4 context   8192: over monolithic    {expected(cases[(4, 8192)])} over 4 "
         "rounds: below" in intervals, "an interval wholly below the threshold"),
        (f"batch  16 context   8192: over monolithic    {expected(cases[(16, 8192)])} over 4 "
         "rounds: not below" in intervals, "an interval wholly above the threshold"),
        (f"batch  32 context   8192: over monolithic    {expected(cases[(32, 8192)])} over 4 "
         "rounds: cannot tell (~" in intervals, "an interval across the threshold"),
        ("batch   4 context  32768: over monolithic    0.900 (one round)" in intervals,
         "one round: no interval"),
        ("writescope over the point's best baseline, of 4 points: below at 1, not below at 1, "
         "cannot tell at 1, one round at 1" in intervals, "the points counted by verdict"),
        # static:0.5 at half monolithic's speed in every round: below everywhere it has rounds.
        ("B = static:0.5     below at 3, not below at 0, cannot tell at 0, one round at 1"
         in intervals, "a baseline against the others, the same way"),
    ]
    checks.append(("time over" not in intervals,
                   "no line of where the time went without the explore and read_cpu_share columns"))
    text += intervals
    # Where writescope's time over the best baseline went, by the kind of its step: two rounds
    # of four steps at 10 ms each under transfer-all (monolithic twice as slow); writescope's
    # step 0 explores (13, then 12.5 ms), step 1 splits by choice (11), steps 2-3 run GPU-only
    # (10 and 10.6, then 10 and 10.2).
    os.makedirs(os.path.join(tmp, "kinds"))
    kinds_grid = os.path.join(tmp, "kinds", "bench-kinds.csv")
    write_grid(kinds_grid, *[(p, b, 8192, t) for b in (4, 16)
                             for p, t in (("writescope", 100), ("transfer-all", 100),
                                          ("monolithic", 50))])
    rounds_ms = ((13, 11, 10, 10.6), (12.5, 11, 10, 10.2))
    with open(os.path.join(tmp, "kinds", "steps-kinds.csv"), "w") as f:
        f.write("policy,round,step,unix_s,step_ms,batch,context,explore,read_cpu_share\n")
        for rnd, ms in enumerate(rounds_ms):
            for i in range(4):
                f.write(f"transfer-all,{rnd},{i},0,10,4,8192,0,0\n")
                f.write(f"monolithic,{rnd},{i},0,20,4,8192,0,0.5\n")
            for i, (value, explore, read) in enumerate(zip(ms, (1, 0, 0, 0), (0.3, 0.2, 0, 0))):
                f.write(f"writescope,{rnd},{i},0,{value},4,8192,{explore},{read}\n")
            # 16 x 8192: GPU-only at every step, 11 ms against transfer-all's 10.
            for policy, value, read in (("transfer-all", 10, 0), ("monolithic", 20, 0.5),
                                        ("writescope", 11, 0)):
                f.write(f"{policy},{rnd},0,0,{value},16,8192,0,{read}\n")
    gap_text = run(kinds_grid).stdout

    def share(steps):  # per round: the steps' extra ms over 40; mean, 95 % interval (t(1))
        values = [sum(ms[i] - 10 for i in steps) / 40 for ms in rounds_ms]
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        half = 12.706 * sd / math.sqrt(len(values))
        return f"{100 * mean:+.1f} % [{100 * (mean - half):+.1f}, {100 * (mean + half):+.1f}]"
    expected_gap = ("    time over transfer-all's, by its steps (share of transfer-all's, 95 % "
                    f"interval): exploring {share([0])} (2 steps, +2.75 ms each), split "
                    f"{share([1])} (2 steps, +1.00 ms each), GPU-only {share([2, 3])} (4 steps, "
                    f"+0.20 ms each); all {share([0, 1, 2, 3])}")
    checks.append((expected_gap in gap_text, "where the time went, by the kind of step"))
    checks.append(("interval): exploring none, split none, GPU-only +10.0 % [+10.0, +10.0] (2 "
                   "steps, +1.00 ms each); all +10.0 % [+10.0, +10.0]" in gap_text,
                   "kinds without steps said so"))
    text += gap_text
    with open(os.path.join(tmp, "kinds", "steps-kinds.csv"), "a") as f:
        f.write("writescope,2,0,0,10,4,8192,0,many\n")
    malformed = run(kinds_grid)
    checks.append((malformed.returncode != 0 and "steps-kinds.csv:" in malformed.stderr
                   and "Traceback" not in malformed.stderr, "a malformed read_cpu_share refused"))
    lower = run("--from-context", "8192", "--threshold", "0.9", first, second)
    checks.append((f"{geo:.3f},   0 of   3 below 0.9" in lower.stdout, "--threshold"))

    missing = run(os.path.join(tmp, "nothing.csv"))
    checks.append((missing.returncode != 0 and "no file" in missing.stderr
                   and "Traceback" not in missing.stderr, "a missing file is refused"))
    lonely = os.path.join(tmp, "bench-lonely.csv")
    write_grid(lonely, ("monolithic", 4, 8192, 98), ("static:0.5", 4, 8192, 60))
    nothing = run(lonely)
    checks.append((nothing.returncode != 0 and "no point with writescope" in nothing.stderr
                   and "Traceback" not in nothing.stderr, "a grid without writescope is refused"))
    bad = run("--threshold", "0", first)
    checks.append((bad.returncode == 2 and "Traceback" not in bad.stderr, "threshold 0 refused"))

finish(checks, text, out.stderr)
