#!/usr/bin/env python3
"""deploy/share_sweep_report.py on a small sweep whose answers are known: the static shares'
steps, the best share and the parabola's least between its neighbours, a best share at the
swept range's end, the other policies against the best static share (merged and per repeat),
repeats keyed by the CSV's round and turn (a repeat without every static share, and a point
with fewer than two, left out and said so), the steps CSV's lines against each policy's steps,
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
        ("batch   4" not in text and "  left out: 1 point(s) with fewer than two static "
         "shares: 4 x 8192 (static:0.3 only)" in text,
         "a point with one static share is left out, said so"),
    ]
    # A bench of two rounds in one runtime (the CSV's round and turn columns): static:0.3
    # failed in round 0, so writescope's round 0 has no whole sweep to be read against (left
    # out, said so); its round 1 (99 ms) against round 1's best, static:0.4 at 100.64 ms.
    rounds_grid = os.path.join(tmp, "bench-rounds.csv")
    with open(rounds_grid, "w") as f:
        f.write(HEADER.rstrip("\n") + ",round,turn\n")
        for rnd in (0, 1):
            for share in (0.3, 0.4, 0.5):
                if (rnd, share) != (0, 0.3):
                    f.write(row(f"static:{share}", 16, 32768, steps[share], share,
                                share).rstrip("\n") + f",{rnd},0\n")
            f.write(row("writescope", 16, 32768, 101 - 2 * rnd, 0.36, 0.35).rstrip("\n")
                    + f",{rnd},0\n")
    by_round = run(rounds_grid)
    text += by_round.stdout
    checks += [
        (by_round.returncode == 0 and f"best static / it {best / 100:.3f}; per repeat "
         f"{best / 99:.3f}, geometric mean {best / 99:.3f}" in by_round.stdout,
         "repeats keyed by the CSV's round, not by their rows' order"),
        ("    left out of its per-repeat ratios: 1 repeat(s) without every static share: round 0 "
         "(no static:0.3)" in by_round.stdout, "a repeat without every static share said so"),
    ]
    # The steps CSV beside it: writescope's lines and each policy's steps against them, at
    # 16 x 32768 (4 layers, 100000 host tokens). Lines: A 10 ns/token, c_C 100 us, B 25, c_G
    # 0, D 20, fixed 200 us, Q 3000 us. static:0.4 reads 0.4: the CPU line says 0.5 ms a layer,
    # it took 0.55; the GPU line 1.5 ms, it took 1.5; the DMA line 1.4 ms, it took 1.4; Q
    # (20 - 6 - 2) / 4 = 3.0 ms. An exploring step of writescope is left out.
    columns = ("policy,round,step,batch,context,step_ms,gpu_attention_ms,cpu_attention_ms,"
               "transfer_ms,gpu_waited_cpu_ms,read_cpu_share,explore,optimal_cpu_share,"
               "host_tokens,cpu_ns_per_token,cpu_fixed_us,gpu_ns_per_token,gpu_fixed_us,"
               "dma_ns_per_token,dma_fixed_us,chain_extra_us\n")
    lines = "10,100,25,0,20,200,3000"
    with open(os.path.join(tmp, "steps-tiny.csv"), "w") as f:
        f.write(columns)
        f.write(f"writescope,0,0,16,32768,20,6,2.0,5.6,2,0.4,0,0.42,100000,{lines}\n")
        f.write(f"writescope,0,1,16,32768,20,6,2.0,5.6,2,0.4,0,0.42,100000,{lines}\n")
        f.write(f"writescope,0,2,16,32768,90,60,0,99,0,0,1,0.99,100000,1,1,1,1,1,1,1\n")
        f.write("static:0.4,0,0,16,32768,20,6,2.2,5.6,2,0.4,0,0.4,100000,nan,nan,nan,nan,nan,"
                "nan,nan\n")
    with_steps = run(grid)
    lines_text = with_steps.stdout
    checks += [
        (with_steps.returncode == 0, "with the steps CSV: exit 0"),
        ("  writescope's lines (medians over its steps): CPU A 10.00 ns/token, c_C 100 us; GPU "
         "B 25.00 ns/token, c_G 0 us; DMA D 20.00 ns/token, fixed 200 us; Q 3000 us; its r* "
         "0.420" in lines_text,
         "the adaptive policy's lines, its exploring step left out"),
        ("    static:0.4   read 0.400: CPU 0.55 / 0.50 (1.10), GPU 1.50 / 1.50 (1.00), DMA "
         "1.40 / 1.40 (1.00), Q 3.00 / 3.00 (1.00)" in lines_text,
         "a static share's steps against the lines"),
        ("    writescope   read 0.400: CPU 0.50 / 0.50 (1.00)" in lines_text,
         "the adaptive policy's own steps against its lines"),
        (lines_text.index("    static:0.4") < lines_text.index("    writescope   read"),
         "static shares first"),
    ]
    with open(os.path.join(tmp, "steps-tiny.csv"), "w") as f:
        f.write("policy,round,step,batch,context,step_ms\n")
    old_steps = run(grid)
    checks.append((old_steps.returncode == 0 and "predates the lines' columns" in old_steps.stdout,
                   "a steps CSV without the lines: said so"))
    missing = run(os.path.join(tmp, "none.csv"))
    checks.append((missing.returncode != 0 and "no file" in missing.stderr
                   and "Traceback" not in missing.stderr, "a missing file is refused"))
    lone = os.path.join(tmp, "bench-lone.csv")
    with open(lone, "w") as f:
        f.write(HEADER + row("static:0.3", 4, 8192, 10) + row("writescope", 4, 8192, 9))
    refused = run(lone)
    checks.append((refused.returncode != 0 and "no point with two static shares" in refused.stderr
                   and "Traceback" not in refused.stderr, "a grid without a sweep is refused"))
    finish(checks, text, out.stderr, lines_text, with_steps.stderr, old_steps.stdout,
           missing.stderr, refused.stderr)
