#!/usr/bin/env python3
"""deploy/expert_drift_report.py on a small steps CSV whose answers are known: the mean log
ratio of one policy's expert time between consecutive rounds (and turns, and benches that each
numbered their rounds from 0 into the CSV), how far apart they ran, the drift between windows
within rounds, steps without CPU experts left out, a point run once, and bad input refused
with exit status 2."""
import math
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "expert_drift_report.py")
HEADER = "policy,round,step,unix_s,batch,context,cpu_expert_ms"


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


checks = []
with tempfile.TemporaryDirectory() as d:
    steps = os.path.join(d, "steps.csv")
    with open(steps, "w") as f:
        f.write(HEADER + ",turn\n")
        # P: round 0's expert time rises 1 % a step, round 1's is flat and e^0.1 faster, so
        # d_i = 0.01 i + 0.1; their step 8 ran no expert on the CPU in round 1 (left out).
        for i in range(9):
            f.write(f"P,0,{i},{100 + 0.5 * i},4,8192,{10 * math.exp(0.01 * i)},0\n")
            f.write(f"P,1,{i},{200 + 0.5 * i},4,8192,{10 * math.exp(-0.1) if i < 8 else 0},0\n")
        # Q: three turns of round 0, 10 s apart, each twice as slow as the one before and
        # flat within itself.
        for turn, ms in ((0, 10), (1, 20), (2, 40)):
            for i in range(8):
                f.write(f"Q,0,{i},{100 + 10 * turn + 0.5 * i},4,8192,{ms},{turn}\n")
        f.write("R,0,0,100,16,8192,5,0\n")  # one round only: nothing to pair
    out = run(steps)
    text = out.stdout
    # P's windows of 4: one pair (steps 0-3 against 4-7), 0.04 apart; Q's two pairs of turns
    # two each, flat. With windows of 2, P has 3 pairs 4 steps apart (starting at steps 0-2),
    # Q 6, flat.
    within4 = math.sqrt(0.04 ** 2 / 3) / math.sqrt(2)
    within2 = math.sqrt(3 * 0.04 ** 2 / 9) / math.sqrt(2)
    checks += [
        (out.returncode == 0, "exit 0"),
        (f"{steps}: 3 policy-point(s)" in text, "the policy-points counted"),
        (f"between turns of a round: rms of the mean log ratio {abs(math.log(0.5)):.3f} over 2 "
         "pair(s), median 10.0 s apart" in text, "each turn against the next one of its round"),
        ("between rounds: rms of the mean log ratio 0.135 over 1 pair(s), median 100.0 s apart"
         in text, "the rounds apart from the turns, the step without CPU experts left out"),
        (f"turns of  4 step(s)  4 step(s) (2.00 s) apart: rms {within4:.3f} over 3 pair(s)"
         in text, "the drift between windows of 4 steps"),
        ("turns of  8 step(s)" not in text, "no window pair longer than the runs"),
    ]
    twos = run(steps, "--windows", "2")
    checks.append((twos.returncode == 0 and f"turns of  2 step(s)  4 step(s) (2.00 s) apart: "
                   f"rms {within2:.3f} over 9 pair(s)" in twos.stdout,
                   "windows twice their length apart, from every start"))
    single = os.path.join(d, "single.csv")
    with open(single, "w") as f:
        f.write(HEADER + "\nP,0,0,100,4,8192,10\n")
    one = run(single)
    checks.append((one.returncode == 0 and "no policy ran a point twice" in one.stdout,
                   "a CSV without a second run of a point says so"))
    # Two benches that each numbered their round 0 and steps from 0 into one CSV (bench-grid.sh
    # without --one-runtime: a bench per policy and repeat, the second in reverse order): the
    # second of P's runs e^0.2 slower, 60 s later; Q's the same work in both.
    benches = os.path.join(d, "benches.csv")
    with open(benches, "w") as f:
        f.write(HEADER + "\n")
        for repeat, order in ((0, "PQ"), (1, "QP")):
            for policy in order:
                for i in range(4):
                    ms = 10 * math.exp(0.2 * repeat) if policy == "P" else 10
                    f.write(f"{policy},0,{i},{100 + 60 * repeat + 0.5 * i},4,8192,{ms}\n")
    twice = run(benches)
    text += twice.stdout
    checks += [
        (twice.returncode == 0 and f"between benches (repeats of a trio each): rms of the mean "
         f"log ratio {math.sqrt(0.2 ** 2 / 2):.3f} over 2 pair(s), median 60.0 s apart"
         in twice.stdout, "benches that restart their rounds compared run by run"),
        ("between rounds" not in twice.stdout, "no round of a bench compared with another's"),
    ]
    for args, what in (((steps, "--windows", "0"), "--windows 0"),
                       ((steps, "--windows", "x"), "--windows x"),
                       ((os.path.join(d, "none.csv"),), "a missing file")):
        bad = run(*args)
        checks.append((bad.returncode == 2 and bad.stderr.startswith("expert_drift_report.py:")
                       and "Traceback" not in bad.stderr, f"{what}: exit 2 with a message"))
    old = os.path.join(d, "old.csv")
    with open(old, "w") as f:
        f.write("policy,round,step\nP,0,0\n")
    missing = run(old)
    checks.append((missing.returncode == 2 and "missing column" in missing.stderr,
                   "a CSV without the columns refused"))

finish(checks, text, out.stderr)
