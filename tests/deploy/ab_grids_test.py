#!/usr/bin/env python3
"""deploy/ab-grids.sh without a GPU (its dry run: the variants interleaved per repeat, the
second in reverse order, each with its flags in the right place; the report, the modes and the
archive; the refusals of bad arguments), and deploy/ab_report.py's arithmetic on CSVs with
known answers (a repeat cut short: the means over the points every repeat has), with the
writescope reads tallied from step records where a variant has them."""
import math
import os
import shutil
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "ab-grids.sh")
REPORT = os.path.join(ROOT, "deploy", "ab_report.py")


def run(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True)


checks = []
with tempfile.TemporaryDirectory() as out:
    dry = run("--dry-run", "--out", out, "--arch", "mixtral", "--repeats", "2",
              "--archive", "/tmp/ab.tgz", "base",
              "nosettle:--settle_missed_rounds=false:cpu_worker/--prefault_kv=false")
    text = dry.stdout
    grids = [line for line in text.splitlines() if "bench-grid.sh" in line]
    checks += [
        (dry.returncode == 0, "dry run succeeds"),
        (len(grids) == 4, "two variants x two repeats, a grid each"),
        (all(f"{out}/{name}/grid-" in grids[i] for i, name in
             enumerate(["base", "nosettle", "nosettle", "base"])),
         "the variants interleaved, in reverse order on the second repeat"),
        ("-- --settle_missed_rounds=false" in grids[1] and "-- " not in grids[0].split("--out")[1],
         "the coordinator flag after --, for its variant only"),
        ("WS_CPU_WORKER_FLAGS=--prefault_kv=false" in grids[1] and
         "WS_CPU_WORKER_FLAGS= " in grids[0], "the cpu_worker flag through the environment"),
        ("--contexts 8192\\,32512" in grids[0] and "--policies writescope" in grids[0],
         "Mixtral's contexts, writescope by default"),
        (f"ab_report.py --arch mixtral --policy writescope {out}/base {out}/nosettle" in text,
         "the report over the variants in order"),
        (f"modes_report.py {out}/nosettle/steps-mixtral.csv" in text, "the modes per variant"),
        (f"tar czf /tmp/ab.tgz -C {out} ." in text, "the archive"),
        (not os.listdir(out), "a dry run writes nothing"),
    ]
    # The full model's point, one variant each: the grid's options passed on.
    full = run("--dry-run", "--out", out, "--arch", "deepseek_v2", "--repeats", "1",
               "--layers", "27", "--batches", "32", "--contexts", "32768", "base",
               "w128:--window_tokens=128")
    full_grids = [line for line in full.stdout.splitlines() if "bench-grid.sh" in line]
    text += full.stdout
    checks += [
        (full.returncode == 0 and len(full_grids) == 2, "a dry run of another grid succeeds"),
        (all("--layers 27 --batches 32 --contexts 32768 " in g for g in full_grids),
         "layers, batches and contexts passed on"),
        ("-- --window_tokens=128" in full_grids[-1] if full_grids else False,
         "the variant's coordinator flag"),
    ]
    # An environment variable of launch.sh's for one variant (the OpenMP spin of the cpu_worker).
    spun = run("--dry-run", "--out", out, "--arch", "qwen3_moe", "--repeats", "1", "base",
               "spin100k:env/WS_CPU_WORKER_SPINCOUNT=100000")
    spun_grids = [line for line in spun.stdout.splitlines() if "bench-grid.sh" in line]
    text += spun.stdout
    checks += [
        (spun.returncode == 0 and len(spun_grids) == 2, "a dry run with an env variant succeeds"),
        (len(spun_grids) == 2 and "env WS_CPU_WORKER_SPINCOUNT=100000 WS_CPU_WORKER_FLAGS=" in
         spun_grids[1] and "SPINCOUNT" not in spun_grids[0],
         "the variable set for its variant only"),
    ]
    capped = run("--dry-run", "--out", out, "--arch", "mixtral", "--repeats", "1",
                 "--contexts", "8192,40000", "a", "b")
    checks.append(("--contexts 8192\\,32512 " in capped.stdout, "Mixtral's contexts capped"))
    # A folder an earlier call wrote into (a warm device keeps /tmp).
    used = tempfile.mkdtemp(prefix="ab-grids-used.")
    open(os.path.join(used, "report.txt"), "w").close()
    for bad, why in ((["--out", out, "--arch", "llama", "a", "b"], "--arch must be"),
                     (["--out", out, "--arch", "mixtral", "--layers", "x", "a", "b"], "--layers"),
                     (["--out", out, "--arch", "mixtral", "--batches", "4,", "a", "b"],
                      "--batches"),
                     (["--out", out, "--arch", "mixtral", "--policy", "bogus", "a", "b"],
                      "unknown policy 'bogus'"),
                     (["--out", out, "--arch", "mixtral", "--policy", "writescope cpu-all", "a",
                       "b"], "takes one policy"),
                     (["--out", out, "--arch", "mixtral", "a"], "two variants or more"),
                     (["--out", out, "--arch", "mixtral", "a", "a:--x=1"], "given twice"),
                     (["--out", out, "--arch", "mixtral", "a", "b:x=1"], "neither --flag"),
                     (["--out", out, "--arch", "mixtral", "a", "b:env/PATH=/x"],
                      "is not env/WS_NAME=VALUE"),
                     (["--out", out, "--arch", "mixtral", "a/b", "c"], "must be letters"),
                     (["--out", out, "--arch", "mixtral", "--repeats", "0", "a", "b"],
                      "positive numbers"),
                     (["--arch", "mixtral", "a", "b"], "--out DIR is required"),
                     (["--out", out, "--arch", "mixtral", "--archive", out + "/x.tgz", "a", "b"],
                      "lies inside --out"),
                     (["--out", used, "--arch", "mixtral", "a", "b"], "is not empty")):
        refused = run(*bad)
        checks.append((refused.returncode == 2 and why in refused.stderr, f"refused: {why}"))

    # The report: two variants, two repeats of two points each; "b" is 10 % slower beyond its
    # experts at every point.
    header = "policy,batch,context,step_ms,cpu_expert_ms,other\n"
    rows = {"a": [(4, 8192, 40.0, 30.0), (16, 8192, 90.0, 50.0),
                  (4, 8192, 42.0, 32.0), (16, 8192, 88.0, 48.0)],
            "b": [(4, 8192, 41.0, 30.0), (16, 8192, 94.0, 50.0),
                  (4, 8192, 43.0, 32.0), (16, 8192, 92.0, 48.0)]}
    dirs = []
    for name, points in rows.items():
        d = os.path.join(out, name)
        os.makedirs(d)
        with open(os.path.join(d, "bench-qwen3_moe.csv"), "w") as f:
            f.write(header)
            f.write("cpu-all,4,8192,99.0,1.0,x\n")  # another policy: left out
            for batch, context, step, experts in points:
                f.write(f"writescope,{batch},{context},{step},{experts},x\n")
        dirs.append(d)
    report = subprocess.run(["python3", REPORT, "--arch", "qwen3_moe", *dirs],
                            capture_output=True, text=True)
    r = report.stdout
    a1 = math.sqrt(40.0 * 90.0)
    a1_less = math.sqrt(10.0 * 40.0)
    b1_less = math.sqrt(11.0 * 44.0)
    checks += [
        (report.returncode == 0, "the report runs"),
        ("a                2 repeat(s)" in r, "a repeat ends where a point comes again"),
        (f"{a1:7.2f} ({a1_less:6.2f})" in r, "geometric means, with and without the experts"),
        (f"({b1_less:6.2f})" in r, "the other variant's"),
        ("batch  16 context   8192: a 89.00, b 93.00 (1.045)" in r, "per point, against the first"),
        ("99.00" not in r, "other policies' rows left out"),
    ]
    checks.append(("Writescope's reads" not in r, "no step records: no tally of the reads"))
    # b's second repeat was cut before 16 x 8192 (its budget): the means take 4 x 8192 alone,
    # in every repeat, and name the point left out (else b's cut repeat reads faster).
    cut_dirs = []
    for name, points in (("a", rows["a"]), ("b", rows["b"][:3])):
        d = os.path.join(out, "cut", name)
        os.makedirs(d)
        with open(os.path.join(d, "bench-qwen3_moe.csv"), "w") as f:
            f.write(header)
            for batch, context, step, experts in points:
                f.write(f"writescope,{batch},{context},{step},{experts},x\n")
        cut_dirs.append(d)
    cut = subprocess.run(["python3", REPORT, "--arch", "qwen3_moe", *cut_dirs],
                         capture_output=True, text=True)
    r += cut.stdout
    checks += [
        (cut.returncode == 0
         and "  a                2 repeat(s):   40.00 ( 10.00)    42.00 ( 10.00)" in cut.stdout
         and "  b                2 repeat(s):   41.00 ( 11.00)    43.00 ( 11.00)"
         in cut.stdout, "the means over the points every repeat has"),
        ("  left out of the means: 1 point(s) some repeat lacks: batch 16 context 8192 (in 3 of "
         "4 repeats)" in cut.stdout, "the points left out of the means named"),
        ("batch  16 context   8192: a 89.00, b 94.00 (1.056)" in cut.stdout,
         "the point still compared on its own"),
    ]
    # Step records of "a" only: one window of six steps, two of them exploring, two changes of
    # mode outside explorations (g s s g), two steps that missed their early rounds.
    with open(os.path.join(dirs[0], "steps-qwen3_moe.csv"), "w") as f:
        f.write("policy,round,step,step_ms,batch,context,read_cpu_share,explore,"
                "predicted_split_ms,predicted_gpu_only_ms,early_rounds_missed\n")
        for step, (share, explore, missed) in enumerate(
                [(0, 0, 0), (0.3, 0, 1), (0, 1, 0), (0, 1, 0), (0.3, 0, 0), (0, 0, 1)]):
            f.write(f"writescope,0,{step},40.0,4,8192,{share},{explore},41.0,40.0,{missed}\n")
        f.write("cpu-all,0,0,99.0,4,8192,1.0,0,nan,nan,0\n")  # another policy: left out
    tallied = subprocess.run(["python3", REPORT, "--arch", "qwen3_moe", *dirs],
                             capture_output=True, text=True)
    t = tallied.stdout
    checks += [
        (tallied.returncode == 0, "the report runs with step records"),
        ("  a                1 windows: exploring 2, changes 2, missed 2" in t,
         "the reads tallied from the step records"),
        ("  b " not in t.split("Writescope's reads")[-1], "a variant without records left out"),
    ]
    with open(os.path.join(dirs[1], "bench-qwen3_moe.csv"), "w") as f:
        f.write("policy,batch,context,step_ms\nwritescope,4,8192,40.0\n")
    bad = subprocess.run(["python3", REPORT, "--arch", "qwen3_moe", *dirs],
                         capture_output=True, text=True)
    checks.append((bad.returncode == 2 and "missing column(s) cpu_expert_ms" in bad.stderr,
                   "refused: a CSV without the experts"))
    missing = subprocess.run(["python3", REPORT, "--arch", "mixtral", *dirs],
                             capture_output=True, text=True)
    checks.append((missing.returncode == 2 and "no such file" in missing.stderr,
                   "refused: a missing CSV"))

shutil.rmtree(used, ignore_errors=True)
finish(checks, text, r)
