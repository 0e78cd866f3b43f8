#!/usr/bin/env python3
"""deploy/profile-bench.sh without a GPU: --dry-run prints the trio's sizes and the commands;
a trio that runs the grid's points first (--grid-first) is sized for the largest of them and
the profiled point, --one-trio profiles every listed policy in one trio, and a malformed
--grid-first is refused with exit status 2; with a stand-in trio (fake_trio.py), a profile that
fails leaves no earlier run's trace behind to be read as its own."""
import os
import subprocess
import sys
import tempfile

from checks import finish
from fake_trio import fake_tree

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "profile-bench.sh")


def run(*args):
    return subprocess.run(["bash", SCRIPT, "--dry-run", *args], capture_output=True, text=True)


checks = []
# A profiled point of 4 after grid points of up to 32 sequences: 32 admitted (run 158's trio
# was sized for 4 and refused the grid's 32 x 32K).
first = run("--arch", "deepseek_v2", "--layers", "4", "--batch", "4", "--context", "8192",
            "--policies", "writescope transfer-all", "--grid-first", "16,32:8192,32768")
text = first.stdout
# 32 x (32768 + 1024) tokens x 1152 B x 4 layers = 4752 MiB, + 10 % + 64.
checks += [
    (first.returncode == 0, "dry run succeeds"),
    ("start_trio profile-bench writescope 5291 --max_sequences=32" in text,
     "the trio sized for the grid's largest batch and context"),
    (text.count("start_trio") == 2 and text.count("stop_trio") == 2, "one trio per policy"),
    ("--batches=16,32 --contexts=8192,32768 --decode_steps=16 --warmup_steps=16" in text,
     "the grid's points first"),
    (text.index("--batches=16,32") < text.index("--batches=4 --contexts=8192"),
     "then the profiled point"),
    ("profile --target=TARGET --steps=4 --out=./profile-transfer-all.json" in text,
     "a trace per policy"),
]
# Without --grid-first the profiled point alone sizes the trio.
alone = run("--arch", "qwen3_moe", "--batch", "8", "--context", "2048", "--policies", "cpu-all")
text += alone.stdout
checks.append((alone.returncode == 0 and "--max_sequences=8" in alone.stdout
               and "--batches=8 --contexts=2048" in alone.stdout, "the profiled point alone"))
# --one-trio: one trio, each point under its policy (listed twice here), a trace each.
one = run("--arch", "deepseek_v2", "--batch", "32", "--context", "32768", "--one-trio",
          "--policies", "writescope static:0.5 writescope", "--grid-first", "16:8192")
text += one.stdout
out = one.stdout
checks += [
    (one.returncode == 0, "--one-trio: dry run succeeds"),
    (out.count("start_trio") == 1 and out.count("stop_trio") == 1, "--one-trio: one trio"),
    ("start_trio profile-bench writescope" in out, "--one-trio: started under the first policy"),
    (out.count("--decode_steps=16 --warmup_steps=16") == 1, "--one-trio: the grid's points once"),
    ("--decode_steps=8 --warmup_steps=8 --policies=static:0.5" in out,
     "--one-trio: a point under each policy"),
    ("--out=./profile-1-writescope.json" in out and "--out=./profile-2-static_0.5.json" in out
     and "--out=./profile-3-writescope.json" in out, "--one-trio: a numbered trace each"),
]
for bad in ("32", "32:", ":8192", "4,,16:8192", "4:8K", "0:8192"):
    refused = run("--grid-first", bad)
    text += refused.stderr
    checks.append((refused.returncode == 2 and "--grid-first must be BATCHES:CONTEXTS"
                   in refused.stderr and "start_trio" not in refused.stdout,
                   f"--grid-first '{bad}' refused"))
# The profiled point's own steps: 8 warm-up and 8 measured unless given.
longer = run("--policies", "writescope", "--point-warmup", "16", "--point-steps", "24",
             "--steps", "12")
text += longer.stdout
checks += [
    (out.count("--decode_steps=8 --warmup_steps=8") == 3, "the profiled points: 8 + 8 by default"),
    (longer.returncode == 0 and "--decode_steps=24 --warmup_steps=16" in longer.stdout and
     "profile --target=TARGET --steps=12" in longer.stdout,
     "--point-warmup and --point-steps set the profiled point's steps"),
    (run("--point-warmup", "0").returncode == 0, "--point-warmup 0: no warm-up"),
]
for flag, bad in (("--point-steps", "0"), ("--point-steps", "x"), ("--point-warmup", "-1")):
    refused = run(flag, bad)
    text += refused.stderr
    checks.append((refused.returncode == 2 and "--point-warmup takes" in refused.stderr and
                   "start_trio" not in refused.stdout, f"{flag} '{bad}' refused"))

# With a stand-in trio and wscope (fake_trio.py) whose profile fails: an earlier run's trace at
# the same path is removed first, not read as this run's.
with tempfile.TemporaryDirectory() as tmp:
    root, bin_dir = fake_tree(ROOT, tmp)
    out_dir = os.path.join(tmp, "out")
    os.makedirs(out_dir)
    stale = os.path.join(out_dir, "profile-writescope.json")
    with open(stale, "w") as f:
        f.write('{"traceEvents": []}')
    failed = subprocess.run(["bash", os.path.join(root, "deploy", "profile-bench.sh"),
                             "--policies", "writescope", "--bin", bin_dir, "--device", "host",
                             "--out", out_dir], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, FAKE_FAIL="profile:writescope"))
    text += failed.stdout + failed.stderr
    checks.append((not os.path.exists(stale)
                   and "wscope profile failed under writescope" in failed.stderr,
                   "a failed profile leaves no earlier trace to be read as its own"))
    # Profiled: the trace is there for profile_layers.py.
    profiled = subprocess.run(["bash", os.path.join(root, "deploy", "profile-bench.sh"),
                               "--policies", "writescope", "--bin", bin_dir, "--device", "host",
                               "--out", out_dir], capture_output=True, text=True, timeout=120)
    text += profiled.stdout + profiled.stderr
    checks.append((profiled.returncode == 0 and os.path.isfile(stale)
                   and "profile failed" not in profiled.stderr, "a profile writes its trace"))
finish(checks, text)
