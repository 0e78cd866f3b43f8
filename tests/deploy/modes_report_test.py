#!/usr/bin/env python3
"""deploy/modes_report.py on small step CSVs: a line per measured window (a repeat of a point is
its own window), the modes spelled out, each mode's count and median, the first exploration,
the changes of mode outside explorations, the steps that missed their early KV rounds, the
explorations whose last step missed them (they taught nothing),
the first step's predictions and rests (NaN shown as '-'), a CSV from before the rests were
recorded, the warm-ups beside their windows, what the explorations paid and spent (where the
CSV says what they paid), output cut short by `head`, and bad input refused with exit status 2."""
import gzip
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "modes_report.py")
HEADER = ("policy,round,step,unix_s,step_ms,gpu_attention_ms,cpu_attention_ms,cpu_expert_ms,"
          "target_cpu_share,placed_cpu_share,optimal_cpu_share,batch,context,read_cpu_share,"
          "explore,predicted_split_ms,predicted_gpu_only_ms")


def row(policy, step, ms, share, explore, split_ms, gpu_only_ms, rests=None, batch=4):
    cells = [policy, "0", str(step), "1.0", str(ms), "0", "0", "0", "0.3", "0.3", "0.3",
             str(batch), "32768", str(share), str(explore), split_ms, gpu_only_ms]
    return ",".join(cells + (list(rests) if rests is not None else []))


def write_csv(path, rows, rests=True):
    """A step CSV of `rows` (row()'s lines), with the rest columns unless rests=False."""
    with open(path, "w") as f:
        f.write(HEADER + (",rest_split_ms,rest_gpu_only_ms" if rests else "") + "\n")
        f.writelines(line + "\n" for line in rows)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


checks = []
with tempfile.TemporaryDirectory() as d:
    new = os.path.join(d, "new.csv")
    write_csv(new, [
        row("writescope", 0, 12.0, 0, 0, "15.5", "12.4", ("10.1", "7.0")),
        row("writescope", 1, 12.2, 0, 0, "15.5", "12.1", ("10.1", "6.9")),
        row("writescope", 2, 10.5, 0.27, 1, "15.5", "12.1", ("10.1", "6.9")),
        row("writescope", 3, 10.1, 0.27, 1, "15.5", "12.1", ("10.1", "6.9")),
        row("writescope", 4, 10.7, 0.14, 0, "6.7", "12.1", ("4.8", "6.9")),
        row("transfer-all", 0, 12.5, 0, 0, "nan", "nan", ("nan", "nan")),
        # A second repeat of the point: step numbers start again.
        row("writescope", 0, 10.0, 0.2, 0, "10.0", "nan", ("7.0", "nan")),
    ])
    out = run(new)
    lines = out.stdout.splitlines()
    # The same CSV gzipped, as docs/runs keeps the step CSVs.
    with open(new, "rb") as f, gzip.open(new + ".gz", "wb") as g:
        g.write(f.read())
    zipped = run(new + ".gz")
    checks += [
        (out.returncode == 0, "runs"),
        (zipped.returncode == 0 and zipped.stdout == out.stdout, "a gzipped CSV reads the same"),
        (len(lines) == 2, "a line per window, repeats apart, other policies left out"),
        (len(lines) > 0 and "round 0 batch 4 context 32768: 5 steps  ggEsEss  " in lines[0],
         "the modes spelled out"),
        (len(lines) > 0 and "split 3 (median 10.50 ms)" in lines[0]
         and "GPU-only 2 (median 12.10 ms)" in lines[0], "each mode's steps and median"),
        (len(lines) > 0 and "exploring 2 (first at step 2)" in lines[0], "the first exploration"),
        (len(lines) > 0 and "predicted split 15.50 / GPU-only 12.40 ms, rests 10.10 / 7.00 ms"
         in lines[0], "the first step's predictions and rests"),
        (len(lines) > 1 and "no exploration" in lines[1]
         and "GPU-only - ms, rests 7.00 / - ms" in lines[1], "NaN shown as '-'"),
    ]
    # Mode changes outside explorations; the steps that missed their early rounds, where the
    # CSV has the column (the window above has none).
    checks.append((len(lines) > 0 and "mode changes 1  " in lines[0]
                   and "missed rounds" not in out.stdout,
                   "the changes of mode outside explorations"))
    missed = os.path.join(d, "missed.csv")
    with open(missed, "w") as f:
        f.write(HEADER + ",early_rounds_missed\n")
        for step, (share, explore, miss) in enumerate([(0, 0, 0), (0.3, 0, 2), (0, 0, 1),
                                                      (0, 1, 0), (0.3, 1, 0), (0, 0, 0)]):
            f.write(row("writescope", step, 9.0, share, explore, "9.5", "11.0") + f",{miss}\n")
    out_missed = run(missed)
    checks.append((out_missed.returncode == 0 and "gsgEgEsg" in out_missed.stdout
                   and "mode changes 2  missed rounds on 2 steps  " in out_missed.stdout,
                   "the steps that missed their early rounds"))
    checks.append(("taught nothing" not in out_missed.stdout,
                   "explorations whose last step took its rounds taught"))
    # Explorations whose last step missed its early rounds measured nothing: the split's
    # second (steps 4-5) and the one-step GPU-only one (step 7); the first (steps 1-2) missed
    # on its first step only.
    untaught = os.path.join(d, "untaught.csv")
    with open(untaught, "w") as f:
        f.write(HEADER + ",early_rounds_missed\n")
        for step, (share, explore, miss) in enumerate([(0, 0, 0), (0.3, 1, 2), (0.3, 1, 0),
                                                      (0, 0, 0), (0.3, 1, 0), (0.3, 1, 2),
                                                      (0, 0, 0), (0, 1, 1), (0.3, 0, 0)]):
            f.write(row("writescope", step, 9.0, share, explore, "9.5", "11.0") + f",{miss}\n")
    out_untaught = run(untaught)
    checks.append((out_untaught.returncode == 0 and "gEsEsgEsEsgEgs" in out_untaught.stdout
                   and "2 exploration(s) taught nothing (the last step missed its rounds)"
                   in out_untaught.stdout, "the explorations that taught nothing"))
    with_warmup = run(missed, "--warmup", untaught)
    checks.append((with_warmup.returncode == 0
                   and "warm-up gEsEsgEsEsgEgs (first: rests - / - ms; 2 exploration(s) "
                   "taught nothing) |  gsgEgEsg" in with_warmup.stdout,
                   "and those of the warm-up"))
    # Steps 0, 2 and 5 read GPU-only without exploring while the split was predicted 9.5
    # against 11.0; the first file's GPU-only steps had the split predicted longer.
    checks.append(("GPU-only though the split was predicted shorter on 3 steps"
                   in out_missed.stdout and "predicted shorter" not in out.stdout,
                   "GPU-only steps against their own prediction"))
    old = os.path.join(d, "old.csv")
    write_csv(old, [row("writescope", 0, 9.0, 0.3, 0, "9.5", "11.0")], rests=False)
    out_old = run(old)
    checks.append((out_old.returncode == 0 and out_old.stdout.rstrip().endswith(
        "predicted split 9.50 / GPU-only 11.00 ms"), "a CSV without the rests"))
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as f:
        f.write("policy,step\nwritescope,0\n")
    refused = run(bad)
    checks.append((refused.returncode == 2 and "missing column" in refused.stderr,
                   "a CSV without the columns refused"))
    # The warm-ups: the n-th of a point goes with its n-th measured window; one of another
    # point is left out.
    warm = os.path.join(d, "warm.csv")
    write_csv(warm, [
        row("writescope", 0, 30.0, 0, 0, "20.0", "19.0", ("18.0", "17.0")),
        row("writescope", 1, 12.0, 0.3, 1, "20.0", "12.0", ("18.0", "9.0")),
        row("writescope", 0, 11.0, 0.3, 0, "11.0", "12.0", ("8.0", "9.0")),
        row("writescope", 0, 11.0, 0, 0, "11.0", "12.0", ("8.0", "9.0"), batch=16),
    ])
    warmed = run(new, "--warmup", warm)
    wl = warmed.stdout.splitlines()
    checks += [
        (warmed.returncode == 0 and len(wl) == 2, "runs with the warm-ups, a line per window"),
        (len(wl) > 0
         and "5 steps  warm-up gEs (first: rests 18.00 / 17.00 ms) |  ggEsEss" in wl[0],
         "the first window's warm-up before its modes"),
        (len(wl) > 1 and "warm-up s (first: rests 8.00 / 9.00 ms) |" in wl[1],
         "the second repeat's warm-up with the second window"),
    ]
    # Two turns of one round (wscope bench --turns), the later one without a warm-up: a window
    # each, the second named by its turn, the warm-up with the first turn only.
    turned = os.path.join(d, "turned.csv")
    with open(turned, "w") as f:
        f.write(HEADER + ",turn\n")
        for turn in (0, 1):
            for step in (0, 1):
                f.write(row("writescope", step, 9.0, 0.3, 0, "9.5", "11.0") + f",{turn}\n")
    turned_warm = os.path.join(d, "turned_warm.csv")
    with open(turned_warm, "w") as f:
        f.write(HEADER + ",turn\n")
        f.write(row("writescope", 0, 30.0, 0, 0, "9.5", "11.0") + ",0\n")
    out_turned = run(turned, "--warmup", turned_warm)
    tl = out_turned.stdout.splitlines()
    checks.append((out_turned.returncode == 0 and len(tl) == 2
                   and tl[0].startswith("round 0 batch 4 context 32768: 2 steps  warm-up g ")
                   and tl[1].startswith("round 0 turn 1 batch 4 context 32768: 2 steps  ss"),
                   "a window per turn, the later turn named, the warm-up with its own turn"))
    # Read by `head`: the rest of the output goes nowhere, and that is no error.
    many = os.path.join(d, "many.csv")
    write_csv(many, [row("writescope", 0, 9.0, 0.3, 0, "9.5", "11.0", batch=4 + i % 2)
                     for i in range(5000)], rests=False)
    piped = subprocess.run(f"'{sys.executable}' '{SCRIPT}' '{many}' | head -n 1", shell=True,
                           capture_output=True, text=True)
    checks.append((piped.stdout.count("\n") == 1 and piped.stderr == "",
                   "piped into head: no traceback"))
    # What the explorations paid and spent, where the CSV has explore_cost_ms: the split's
    # first (steps 1-2, paid 1.0, the picked GPU-only predicted at 10.0: spent 1.5 + 0.5) and
    # second (step 5, paid 3.0, spent 14.0 - 10.0); GPU-only's (step 7, no cost, spent 9.0 -
    # 9.5, the split's prediction).
    costs = os.path.join(d, "costs.csv")
    with open(costs, "w") as f:
        f.write(HEADER + ",explore_cost_ms\n")
        for step, (ms, share, explore, cost) in enumerate([
                (10.0, 0, 0, "nan"), (11.5, 0.3, 1, "1.0"), (10.5, 0.3, 1, "nan"),
                (10.0, 0, 0, "nan"), (10.0, 0, 0, "nan"), (14.0, 0.3, 1, "3.0"),
                (9.5, 0.3, 0, "nan"), (9.0, 0, 1, "nan"), (9.5, 0.3, 0, "nan")]):
            f.write(row("writescope", step, ms, share, explore, "9.5", "10.0") + f",{cost}\n")
    out_costs = run(costs)
    cl = out_costs.stdout.splitlines()
    checks += [
        (out_costs.returncode == 0 and len(cl) == 3, "a line per explored mode after the window"),
        (len(cl) > 1 and cl[1] == "explorations of the split at batch 4 context 32768: 2, paid "
         "2.00 ms each (2), spent 3.00 ms each over the picked mode's prediction (2); spent "
         "over paid 1.50 where both are known", "the split's explorations: paid and spent"),
        (len(cl) > 2 and cl[2] == "explorations of GPU-only at batch 4 context 32768: 1, none "
         "paid, spent -0.50 ms each over the picked mode's prediction (1)",
         "an exploration without a cost"),
        ("explorations of" not in out.stdout, "no such lines without the column"),
    ]
    back_to_back = os.path.join(d, "back_to_back.csv")
    with open(back_to_back, "w") as f:
        f.write(HEADER + ",explore_cost_ms\n")
        for step, (ms, cost) in enumerate([(11.0, "1.0"), (11.0, "nan"), (12.0, "2.0"),
                                           (12.0, "nan")]):
            f.write(row("writescope", step, ms, 0.3, 1, "9.5", "10.0") + f",{cost}\n")
    out_b2b = run(back_to_back)
    checks.append((out_b2b.returncode == 0 and "at batch 4 context 32768: 2, paid 1.50 ms each "
                   "(2), spent 3.00 ms each" in out_b2b.stdout,
                   "explorations back to back told apart by their cost"))
    nobody = run(new, "--policy", "cpu-all")
    checks.append((nobody.returncode == 2 and "no steps of policy cpu-all" in nobody.stderr,
                   "a policy with no steps refused"))

finish(checks, out.stdout, out.stderr)
