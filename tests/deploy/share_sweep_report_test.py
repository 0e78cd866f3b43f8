#!/usr/bin/env python3
"""deploy/share_sweep_report.py on a small sweep whose answers are known: the static shares'
steps, the best share and the parabola's least between its neighbours, a best share at the
swept range's end, the other policies against the best static share (merged and per repeat),
and the refusals (no file, no point with two static shares) without a traceback."""
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "share_sweep_report.py")
HEADER = "policy,layers,batch,context,steps,tokens_per_s,step_ms,placed_cpu_share,read_cpu_share\n"


def row(policy, batch, context, step, placed=0.0, read=0.0):
    """A bench row whose throughput is batch tokens per `step` ms."""
    return f"{policy},4,{batch},{context},8,{batch * 1e3 / step},{step},{placed},{read}\n"


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    grid = os.path.join(tmp, "bench-tiny.csv")
    with open(grid, "w") as f:
        f.write(HEADER)
        # 16 x 32768: step(R) = 100 + 400 (R - 0.42)^2 at R = 0.3, 0.4, 0.5, two repeats each
        # (equal in both: the merge keeps them), writescope 101 then 99, monolithic 104 once.
        for _ in range(2):
            for share in (0.3, 0.4, 0.5):
                f.write(row(f"static:{share}", 16, 32768, 100 + 400 * (share - 0.42) ** 2, share,
                            share))
        f.write(row("writescope", 16, 32768, 101, 0.36, 0.35))
        f.write(row("writescope", 16, 32768, 99, 0.36, 0.35))
        f.write(row("monolithic", 16, 32768, 104, 0.4, 0.4))
        # 32 x 32768: the steps fall with R, the best is the highest share swept.
        f.write(row("static:0.3", 32, 32768, 120))
        f.write(row("static:0.5", 32, 32768, 110))
        f.write(row("writescope", 32, 32768, 100, 0.55, 0.55))
        # 4 x 8192: one static share only, left out.
        f.write(row("static:0.3", 4, 8192, 10))
        f.write(row("writescope", 4, 8192, 10))
    out = run(grid)
    text = out.stdout

    steps = {s: 100 + 400 * (s - 0.42) ** 2 for s in (0.3, 0.4, 0.5)}
    best = steps[0.4]
    # A parabola through three points of a parabola is that parabola: its least is at 0.42.
    ws_merged = (101 + 99) / 2  # the harmonic mean of the throughputs is the mean step
    checks = [
        (out.returncode == 0, "exit 0"),
        (f"  static 0.300: {steps[0.3]:8.2f} ms" in text, "a static share's step"),
        (f"  best static share 0.400: {best:.2f} ms; the parabola through it and its neighbours"
         " is least at R = 0.420" in text, "the best share and the parabola's least"),
        (f"  writescope: {ws_merged:8.2f} ms (read 0.350, placed 0.360); best static / it "
         f"{best / ws_merged:.3f}; per repeat {best / 101:.3f} {best / 99:.3f}, geometric mean "
         f"{(best / 101 * best / 99) ** 0.5:.3f}" in text, "writescope against the best share"),
        (f"  monolithic: {104:8.2f} ms (read 0.400, placed 0.400); best static / it "
         f"{best / 104:.3f}; per repeat {best / 104:.3f}" in text,
         "monolithic's one repeat against the first repeat's best"),
        (text.index("  writescope:") < text.index("  monolithic:"), "the adaptive policy first"),
        ("  best static share 0.500: 110.00 ms; it is the highest share swept, the optimum may "
         "lie beyond it" in text, "a best share at the end of the range"),
        ("batch   4" not in text, "a point with one static share is left out"),
    ]
    missing = run(os.path.join(tmp, "none.csv"))
    checks.append((missing.returncode != 0 and "no file" in missing.stderr
                   and "Traceback" not in missing.stderr, "a missing file is refused"))
    lone = os.path.join(tmp, "bench-lone.csv")
    with open(lone, "w") as f:
        f.write(HEADER + row("static:0.3", 4, 8192, 10) + row("writescope", 4, 8192, 9))
    refused = run(lone)
    checks.append((refused.returncode != 0 and "no point with two static shares" in refused.stderr
                   and "Traceback" not in refused.stderr, "a grid without a sweep is refused"))
    finish(checks, text, out.stderr, missing.stderr, refused.stderr)
