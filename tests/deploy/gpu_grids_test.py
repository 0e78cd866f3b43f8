#!/usr/bin/env python3
"""deploy/gpu-grids.sh without a GPU: --dry-run prints the grids it would run (contexts per
shape, each grid's share of the time budget, the reports and the pooled report), and bad
arguments are refused with exit status 2 before anything runs; deploy/bench-grid.sh, which it
runs per grid, refuses bad flags before a trio starts. With a stand-in trio and wscope
(fake_trio.py): bench-grid.sh ends with exit 1 where a bench call failed, after running the
others, and gpu-grids.sh with exit 1 where no grid wrote a bench CSV."""
import os
import shutil
import subprocess
import sys
import tempfile

from checks import finish
from fake_trio import fake_tree, write_script

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "gpu-grids.sh")


def run(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True)


checks = []
with tempfile.TemporaryDirectory() as out:
    dry = run("--dry-run", "--out", out, "--budget-s", "320", "--archive", "/tmp/g.tgz",
              "deepseek_v2:2:48", "mixtral:1:16:120", "qwen3_moe:1:48")
    text = dry.stdout
    checks += [
        (dry.returncode == 0, "dry run succeeds"),
        # 260 s after the 20 s kept back for the reports and the 40 for the probe after the
        # grids: a third each unless given.
        ("timeout 86 " in text and "--arch deepseek_v2" in text, "an equal share of the budget"),
        ("timeout 120 " in text and "--contexts 8192\\,32512" in text, "Mixtral: its own time, 32512"),
        ("--steps 48 --repeats 2" in text, "repeats and steps passed on"),
        ("--ceilings qwen3_moe" in text, "a report per grid"),
        (f"modes_report.py {out}/steps-mixtral.csv" in text, "the modes per grid"),
        (f"mode_cost_report.py {out}/steps-qwen3_moe.csv > {out}/mode-cost-qwen3_moe.txt"
         in text, "writescope's steps against transfer-all's per grid"),
        (f"bench-deepseek_v2.csv --pool-with {out}/bench-mixtral.csv {out}/bench-qwen3_moe.csv"
         in text, "the pooled report over the others"),
        (f"tar czf /tmp/g.tgz -C {out} ." in text, "the archive of the whole DIR"),
        (not os.listdir(out), "a dry run writes nothing"),
        (f"ws_probe --json={out}/probe.json --channel=false" in text
         and text.index("ws_probe") < text.index("bench-grid.sh"),
         "the lease's ceilings probed before the grids"),
        (f"--ceilings qwen3_moe --probe {out}/probe.json" in text,
         "the reports take the lease's probe"),
        (f"ws_probe --json={out}/probe-after.json" in text
         and text.index("probe-after.json") > text.rindex("bench-grid.sh"),
         "the lease probed again after the grids"),
        (f"--ceilings mixtral --probe {out}/probe.json --probe {out}/probe-after.json" in text
         and text.index("--probe " + out + "/probe-after.json") > text.index("probe-after.log"),
         "then each grid's report again with both probes"),
    ]
    # The decoded tokens' sampling, passed on to every grid (default: none, greedy).
    sampled = run("--dry-run", "--out", out, "--sampling", "temperature=0.7,top_p=0.9",
                  "qwen3_moe:1:8", "mixtral:1:8")
    checks += [
        (sampled.returncode == 0, "a dry run with --sampling succeeds"),
        (sampled.stdout.count("--sampling temperature=0.7\\,top_p=0.9") == 2,
         "--sampling passed on to each grid"),
        ("--sampling" not in dry.stdout, "greedy unless --sampling"),
    ]
    bad_sampling = run("--dry-run", "--out", out, "--sampling", "temperature=hot", "qwen3_moe:1:8")
    checks.append((bad_sampling.returncode == 2 and "--sampling takes" in bad_sampling.stderr
                   and not bad_sampling.stdout.strip(), "a bad --sampling is refused at once"))
    # One point of the full model, two policies; Mixtral's contexts above 32512 run at 32512.
    full = run("--dry-run", "--out", out, "--layers", "27", "--batches", "32", "--contexts",
               "8192,40000", "--policies", "writescope monolithic", "deepseek_v2:2:16",
               "mixtral:1:16")
    text += full.stdout
    checks += [
        (full.returncode == 0, "a dry run with the grid's options succeeds"),
        ("--arch deepseek_v2 --layers 27 --batches 32 --contexts 8192\\,40000 --policies "
         "writescope\\ monolithic" in full.stdout, "layers, batches, contexts, policies passed on"),
        ("--arch mixtral --layers 27 --batches 32 --contexts 8192\\,32512 " in full.stdout,
         "Mixtral's context capped at 32512"),
        ("--one-runtime" not in full.stdout, "one trio per policy unless --one-runtime"),
        ("mode_cost_report.py" not in full.stdout and "modes_report.py" in full.stdout,
         "no steps against transfer-all where it does not run"),
    ]
    # --one-runtime: passed on to bench-grid.sh (one trio for all the policies).
    one = run("--dry-run", "--out", out, "--one-runtime", "qwen3_moe:2:16")
    text += one.stdout
    checks += [
        (one.returncode == 0, "a dry run with --one-runtime succeeds"),
        ("--repeats 2 --one-runtime --time-limit 510 --out" in one.stdout
         and "timeout 510 " in one.stdout,
         "--one-runtime passed on, the grid's time with it (the bench ends within it, whole "
         "points only; the timeout behind it)"),
        ("--time-limit" not in full.stdout, "no time limit for a trio per policy"),
    ]
    # --turns and --turn-warmup: passed on with --one-runtime, refused without it.
    turned = run("--dry-run", "--out", out, "--one-runtime", "--turns", "3", "--turn-warmup",
                 "4", "qwen3_moe:2:8")
    text += turned.stdout
    checks += [
        (turned.returncode == 0
         and "--repeats 2 --one-runtime --turns 3 --turn-warmup 4 --time-limit 510 --out"
         in turned.stdout,
         "--turns and --turn-warmup passed on"),
        ("--turns" not in one.stdout, "one turn a point unless --turns"),
    ]
    for args, why in ((["--turns", "3"], "--turns without --one-runtime"),
                      (["--one-runtime", "--turns", "x"], "--turns not a number"),
                      (["--one-runtime", "--turns", "0"], "--turns 0"),
                      (["--one-runtime", "--turn-warmup", "08"], "--turn-warmup 08"),
                      (["--one-runtime", "--turn-warmup"], "--turn-warmup without a value")):
        refused = run("--dry-run", "--out", out, *args, "qwen3_moe:2:8")
        checks.append((refused.returncode == 2 and "gpu-grids.sh:" in refused.stderr
                       and not refused.stdout.strip(), f"{why}: refused (exit 2)"))
    unprobed = run("--dry-run", "--out", out, "--no-probe", "qwen3_moe:1:16")
    text += unprobed.stdout
    checks.append((unprobed.returncode == 0 and "ws_probe" not in unprobed.stdout
                   and "timeout 550 " in unprobed.stdout
                   and "--probe" not in unprobed.stdout and "--ceilings qwen3_moe" in unprobed.stdout,
                   "--no-probe: no probe, the documented ceilings only"))
    # A folder an earlier call wrote into (a warm device keeps /tmp).
    used = tempfile.mkdtemp(prefix="gpu-grids-used.")
    open(os.path.join(used, "bench-qwen3_moe.csv"), "w").close()
    for bad, why in ((["--out", out, "llama:1:16"], "unknown arch"),
                     (["--out", out, "--layers", "0", "qwen3_moe:1:16"], "--layers"),
                     (["--out", out, "--batches", "4,,16", "qwen3_moe:1:16"], "--batches"),
                     (["--out", out, "--contexts", "8K", "qwen3_moe:1:16"], "--contexts"),
                     (["--out", out, "--policies", "writescope bogus", "qwen3_moe:1:16"],
                      "unknown policy 'bogus'"),
                     (["--out", out, "--policies", " ", "qwen3_moe:1:16"], "no policy given"),
                     (["--out", out, "--policies", "static:1.5", "qwen3_moe:1:16"],
                      "unknown policy 'static:1.5'"),
                     (["--out", out, "qwen3_moe:0:16"], "positive numbers"),
                     (["--out", out, "qwen3_moe:1:16:10:3"], "positive numbers"),
                     (["--out", out, "--budget-s", "x", "qwen3_moe:1:16"], "--budget-s"),
                     (["qwen3_moe:1:16"], "--out DIR is required"),
                     (["--out", out], "no grid to run"),
                     (["--out", out, "--archive", out + "/g.tgz", "qwen3_moe:1:16"],
                      "lies inside --out"),
                     (["--out", used, "qwen3_moe:1:16"], "is not empty")):
        refused = run(*bad)
        checks.append((refused.returncode == 2 and why in refused.stderr, f"refused: {why}"))

shutil.rmtree(used, ignore_errors=True)

# bench-grid.sh, which gpu-grids.sh runs per grid: every flag checked before a trio starts
# (--bin /nonexistent: a trio could not start anyway; exit 2 with the flag named, nothing
# printed of a grid).
GRID = os.path.join(ROOT, "deploy", "bench-grid.sh")
with tempfile.TemporaryDirectory() as out:
    for args, why in ((["--steps", "abc"], "--steps must be"),
                      (["--steps", "0"], "--steps must be"),
                      (["--warmup", "x"], "--warmup must be"),
                      (["--layers", "0"], "--layers must be"),
                      (["--batches", "4,x"], "--batches must be"),
                      (["--contexts", "8K"], "--contexts must be"),
                      (["--policies", "bogus"], "unknown policy 'bogus'"),
                      (["--policies", "writescope static:2"], "unknown policy 'static:2'"),
                      (["--arch", "llama"], "--arch must be")):
        argv = ["--arch", "qwen3_moe", *args] if args[0] != "--arch" else args
        refused = subprocess.run(["bash", GRID, *argv, "--bin", "/nonexistent", "--out", out],
                                 capture_output=True, text=True, timeout=60)
        text += refused.stderr
        checks.append((refused.returncode == 2 and why in refused.stderr
                       and "bench-grid.sh:" in refused.stderr and "unbound" not in refused.stderr
                       and not refused.stdout.strip(),
                       f"bench-grid.sh {' '.join(args)}: refused before a trio (exit 2)"))

# Exit statuses, with a stand-in trio and wscope (fake_trio.py): a failed bench call leaves
# the others to run and their rows written, and the script ends with exit 1; all passing, 0.
with tempfile.TemporaryDirectory() as tmp:
    root, bin_dir = fake_tree(ROOT, tmp)
    log = os.path.join(tmp, "calls.log")

    def grid(out, fail, *args):
        env = dict(os.environ, FAKE_LOG=log, FAKE_FAIL=fail)
        open(log, "w").close()
        return subprocess.run(["bash", os.path.join(root, "deploy", "bench-grid.sh"), "--arch",
                               "qwen3_moe", "--batches", "4", "--contexts", "8192", "--bin",
                               bin_dir, "--device", "host", "--out", out, *args],
                              capture_output=True, text=True, env=env, timeout=120)

    failed = grid(os.path.join(tmp, "a"), "bench:cpu-all", "--policies", "writescope cpu-all",
                  "--repeats", "2")
    with open(log) as f:
        calls = [line.split()[1] for line in f if line.startswith("bench ")]
    with open(os.path.join(tmp, "a", "bench-qwen3_moe.csv")) as f:
        rows = f.read().splitlines()[1:]
    text += failed.stdout + failed.stderr
    checks += [
        (failed.returncode == 1 and "2 wscope bench call(s) failed" in failed.stderr,
         "bench-grid.sh: exit 1 where bench calls failed"),
        (calls == ["writescope", "cpu-all", "cpu-all", "writescope"]
         and rows == ["writescope,4,4,8192,8,100,40"] * 2,
         "bench-grid.sh: the calls after a failed one still run, their rows written"),
        (f"bench-grid: {tmp}/a/bench-qwen3_moe.csv" in failed.stdout,
         "bench-grid.sh: the CSV named at the end all the same"),
    ]
    passed = grid(os.path.join(tmp, "b"), "", "--policies", "writescope cpu-all")
    text += passed.stdout + passed.stderr
    checks.append((passed.returncode == 0, "bench-grid.sh: exit 0 where every call passed"))
    one = grid(os.path.join(tmp, "c"), "bench:writescope", "--one-runtime", "--policies",
               "writescope cpu-all")
    text += one.stdout + one.stderr
    checks.append((one.returncode == 1 and "1 wscope bench call(s) failed" in one.stderr,
                   "bench-grid.sh --one-runtime: exit 1 where the bench failed"))

    # gpu-grids.sh (with a stand-in bundle and bench-grid.sh): exit 1 where no grid wrote a
    # bench CSV (every grid failed or timed out), 0 where one did, the archive packed either way.
    write_script(os.path.join(root, "deploy", "gpu-run.sh"), "#!/usr/bin/env bash\nexit 0\n")

    def grids(stand_in, name):
        write_script(os.path.join(root, "deploy", "bench-grid.sh"), stand_in)
        out = os.path.join(tmp, name)
        return subprocess.run(["bash", os.path.join(root, "deploy", "gpu-grids.sh"), "--out", out,
                               "--no-probe", "--archive", out + ".tgz", "qwen3_moe:1:8",
                               "mixtral:1:8"], capture_output=True, text=True, timeout=120)

    none = grids("#!/usr/bin/env bash\necho 'a grid that died'; exit 1\n", "none")
    text += none.stdout + none.stderr
    checks.append((none.returncode == 1 and "no grid wrote a bench CSV" in none.stderr
                   and os.path.isfile(os.path.join(tmp, "none.tgz")),
                   "gpu-grids.sh: exit 1 where no grid wrote a bench CSV, the logs packed"))
    some = grids("#!/usr/bin/env bash\n"
                 "while [[ $# -gt 0 ]]; do\n"
                 "  case $1 in --arch) a=$2 ;; --out) o=$2 ;; esac; shift\n"
                 "done\n"
                 "[[ $a == mixtral ]] || exit 1\n"
                 "printf 'policy,layers,batch,context,steps,tokens_per_s,step_ms\\n"
                 "writescope,4,4,8192,8,100,40\\n' >$o/bench-$a.csv; exit 1\n", "some")
    text += some.stdout + some.stderr
    checks.append((some.returncode == 0 and "no grid wrote" not in some.stderr
                   and os.path.isfile(os.path.join(tmp, "some", "report-mixtral.txt")),
                   "gpu-grids.sh: exit 0 where a grid wrote its CSV (the other failed)"))
finish(checks, text)
