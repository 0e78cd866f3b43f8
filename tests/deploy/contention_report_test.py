#!/usr/bin/env python3
"""deploy/contention_report.py on CSVs whose answers are known: the phases with their settle
gaps, explorations counted per phase, and writescope's steps by kind within a round; and
deploy/contention.sh with a stand-in trio (fake_trio.py): bad flags and a used --out refused
before a trio starts."""
import os
import subprocess
import sys
import tempfile

from checks import finish
from fake_trio import fake_tree

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "contention_report.py")
HEADER = ("policy,round,step,unix_s,step_ms,gpu_attention_ms,cpu_attention_ms,cpu_expert_ms,"
          "target_cpu_share,placed_cpu_share,optimal_cpu_share,batch,context,read_cpu_share,"
          "explore,predicted_split_ms,predicted_gpu_only_ms\n")


def step(policy, rnd, i, t, ms, read, explore=0):
    return (f"{policy},{rnd},{i},{t},{ms},0,0,0,0.5,0.5,0.5,16,32768,{read},{explore},"
            f"0,0\n")


def run(steps, events, *extra, header=HEADER):
    with tempfile.TemporaryDirectory() as d:
        s, e = os.path.join(d, "steps.csv"), os.path.join(d, "events.csv")
        with open(s, "w") as f:
            f.write(header + "".join(steps))
        with open(e, "w") as f:
            f.write("policy,unix_s,event\n" + "".join(events))
        return subprocess.run([sys.executable, SCRIPT, s, e, *extra], capture_output=True,
                              text=True)


# The load runs from t = 100 to 200 s; settle 3 s.
steps = [
    # static: 50 ms before, 100 during (t = 101 is settling: left out), 60 after.
    step("static:0.5", 0, 0, 90, 50, 0.5), step("static:0.5", 0, 1, 95, 50, 0.5),
    step("static:0.5", 0, 2, 101, 999, 0.5), step("static:0.5", 1, 0, 150, 100, 0.5),
    step("static:0.5", 1, 1, 160, 100, 0.5), step("static:0.5", 1, 2, 170, 100, 0.5),
    step("static:0.5", 2, 0, 202, 999, 0.5), step("static:0.5", 2, 1, 210, 60, 0.5),
    # writescope, before: same (split after split) 40, an exploration (GPU-only) 90, the step
    # after it 45, a switch to GPU-only 70, then GPU-only again 41. Round 1's first step has
    # no step before it in its round: no kind.
    step("writescope", 0, 0, 10, 40, 0.3), step("writescope", 0, 1, 11, 40, 0.3),
    step("writescope", 0, 2, 12, 90, 0.0, 1), step("writescope", 0, 3, 13, 45, 0.3),
    step("writescope", 0, 4, 14, 70, 0.0), step("writescope", 0, 5, 15, 41, 0.0),
    step("writescope", 1, 0, 16, 500, 0.3),
    # during: one exploration, no kind counted after the settle gap for t = 102.
    step("writescope", 2, 0, 102, 777, 0.3), step("writescope", 2, 1, 120, 80, 0.3, 1),
    step("writescope", 2, 2, 121, 82, 0.3),
]
events = ["static:0.5,100,load start\n", "static:0.5,200,load end\n",
          "writescope,100,load start\n", "writescope,200,load end\n"]
out = run(steps, events)
text = out.stdout
checks = [
    (out.returncode == 0, f"exit 0 (stderr: {out.stderr})"),
    ("static:0.5     before   50.0   50.0 n   2 expl  0 | during  100.0  100.0 n   3 expl  0 | "
     "after   60.0   60.0 n   1 expl  0" in text, "static's phases, settling steps left out"),
    # writescope before: 40 40 90 45 70 41 500 -> median 45, mean 118.0, 1 exploration.
    ("writescope     before   45.0  118.0 n   7 expl  1 | during   81.0   81.0 n   2 expl  1 | "
     "after none" in text, "writescope's phases"),
    ("before switch n   1 med   70.0     | same n   2 med   40.5     | explore n   1 med   90.0"
     "     | after explore n   1 med   45.0" in text, "writescope's kinds before the load"),
    ("during switch n   0" in text and "explore n   1 med   80.0" in text and
     "after explore n   1 med   82.0" in text, "writescope's kinds during the load"),
    ("static:0.5: steps by kind" not in text, "no kinds for a policy that never explores"),
]
# Another settle: 0 s keeps the settling steps (static during: 999, 100, 100, 100).
text0 = run(steps, events, "--settle", "0").stdout
checks.append(("during  100.0  324.8 n   4" in text0, "--settle 0 keeps t = 101"))
# A policy without its load events: exit 2 with a message.
bad = run(steps, ["static:0.5,100,load start\n"])
checks.append((bad.returncode == 2 and "no load start and end" in bad.stderr,
               f"missing events: exit 2 (got {bad.returncode}, {bad.stderr!r})"))

checks.append(("re-splits" not in text, "no re-split line without the columns"))

# With the re-split columns: monolithic moved blocks at two steps (one settling: counted, as
# every step is); static moved none and gets no line.
RESPLIT_HEADER = HEADER.rstrip("\n") + ",resplit_ms,resplit_blocks\n"


def with_resplit(row, ms, blocks):
    return row.rstrip("\n") + f",{ms},{blocks}\n"


resplit_steps = [
    with_resplit(step("monolithic", 0, 0, 90, 50, 0.4), 0, 0),
    with_resplit(step("monolithic", 0, 1, 101, 80, 0.1), 30.5, 300),
    with_resplit(step("monolithic", 0, 2, 150, 60, 0.1), 0, 0),
    with_resplit(step("monolithic", 1, 0, 210, 60, 0.4), 9.5, 100),
    with_resplit(step("static:0.5", 0, 0, 90, 50, 0.5), 0, 0),
]
resplit_events = events + ["monolithic,100,load start\n", "monolithic,200,load end\n"]
out_r = run(resplit_steps, resplit_events, header=RESPLIT_HEADER)
text_r = out_r.stdout
checks.append((out_r.returncode == 0 and
               "monolithic     re-splits: 2 steps, 400 blocks moved, 40.0 ms of copies "
               "(16.0 % of its 250 ms of steps)" in text_r,
               f"monolithic's re-splits over all its steps (stderr: {out_r.stderr})"))
checks.append(("static:0.5     re-splits" not in text_r, "no line for a policy that moved none"))

# The reaction: writescope above never read GPU-only by choice during the load (its steps
# there read split), and its last step before the load's end read split by choice.
checks.append(("writescope     not GPU-only during the load; split again 0.00 s after it" in text,
               "writescope's reaction without GPU-only steps"))
checks.append(("static:0.5     GPU-only" not in text and "static:0.5     not" not in text,
               "no reaction for a policy that never explores"))
# GPU-only by choice 2.5 s into the load (an exploration at 101 and a split step at 101.5
# before it do not count), split again by choice 1.5 s after it: the exploration at 200.5
# does not count, the warm-up step at 201.5 does where --warmup gives it, the measured one
# at 203 otherwise.
reaction_steps = [
    step("writescope", 0, 0, 99, 40, 0.3), step("writescope", 0, 1, 101, 90, 0.0, 1),
    step("writescope", 0, 2, 101.5, 45, 0.3), step("writescope", 1, 0, 102.5, 70, 0.0),
    step("writescope", 1, 1, 150, 71, 0.0), step("writescope", 2, 0, 200.5, 60, 0.3, 1),
    step("writescope", 3, 0, 203, 40, 0.3),
]
warmup_steps = [step("writescope", 3, 0, 201.5, 42, 0.3)]
with tempfile.TemporaryDirectory() as d:
    w = os.path.join(d, "warmup.csv")
    with open(w, "w") as f:
        f.write(HEADER + "".join(warmup_steps))
    out_w = run(reaction_steps, events[2:], "--warmup", w)
out_m = run(reaction_steps, events[2:])
checks.append((out_w.returncode == 0 and
               "Reaction (measured and warm-up steps; by choice: not exploring):" in out_w.stdout
               and "writescope     GPU-only 2.50 s into the load; split again 1.50 s after it"
               in out_w.stdout, f"the reaction with the warm-ups (stderr: {out_w.stderr})"))
checks.append(("Reaction (measured steps only" in out_m.stdout and
               "GPU-only 2.50 s into the load; split again 3.00 s after it" in out_m.stdout,
               "the reaction from the measured steps alone"))
# The first split exploration after the load (200.5 s), and what started it where the CSV
# has the explore_reason column.
checks.append(("split again 3.00 s after it (the split explored 0.50 s after it)" in out_m.stdout,
               "the first split exploration after the load"))
REASON_HEADER = HEADER.rstrip("\n") + ",explore_reason\n"
reason_steps = [row.rstrip("\n") + (",rest_shift\n" if row.split(",")[14] == "1" else ",\n")
                for row in reaction_steps]
out_reason = run(reason_steps, events[2:], header=REASON_HEADER)
checks.append(("split again 3.00 s after it (the split explored 0.50 s after it: rest_shift)"
               in out_reason.stdout, f"what started it (stderr: {out_reason.stderr})"))
# Split by choice at the load's end: back at once.
held = run([step("writescope", 0, 0, 150, 40, 0.3), step("writescope", 0, 1, 151, 90, 0.0, 1),
            step("writescope", 0, 2, 199, 45, 0.2)], events[2:])
checks.append(("not GPU-only during the load; split again 0.00 s after it" in held.stdout,
               "a split held through the load is split again at once"))
# The rests per load (load 100-200 s, settle 3 s): the medians over 97-100 s and 197-200 s.
# Split 30 -> 120 (the 500 at 96 lies before the window, the NaN at 98 is left out),
# GPU-only 40 -> 80 (its 999 at 150 lies in neither): the split's rise 2.25 times GPU-only's.
# Without the columns (above) no such lines.
REST_HEADER = HEADER.rstrip("\n") + ",rest_split_ms,rest_gpu_only_ms\n"
rest_rows = [(96, 500, 40), (97.5, 30, 40), (98, "nan", 40), (99, 30, 40), (150, 60, 999),
             (197.5, 110, 80), (198, 130, 70), (199, 120, 90)]
rest_steps = [step("writescope", 0, i, t, 50, 0.0, 1 if i == 0 else 0).rstrip("\n") +
              f",{split},{gpu}\n" for i, (t, split, gpu) in enumerate(rest_rows)]
out_rests = run(rest_steps, events[2:], header=REST_HEADER)
checks.append(("load 1: split 30.0 -> 120.0, GPU-only 40.0 -> 80.0; the split's rise 2.25 "
               "times GPU-only's" in out_rests.stdout, f"the rests per load ({out_rests.stderr})"))
checks.append(("Rests per load" not in text and "Rests per load" not in held.stdout,
               "no rests without their columns"))

# Two loads (contention.sh --cycles 2): 100-120 s and 140-160 s, settle 3 s. "during" is
# either load's time, "after" the time after a load's end before the next starts (122, an
# exploration, and 141.5 settle). The reaction per load: GPU-only 1.0 s into the first and
# not split again after it (the split at 141.5 lies in the second load: not the first's
# return); GPU-only 15.0 s into the second (150 read split), split again 4.0 s after it.
cycle_steps = [
    step("writescope", 0, 0, 90, 40, 0.3), step("writescope", 0, 1, 101, 999, 0.0),
    step("writescope", 0, 2, 110, 80, 0.0), step("writescope", 0, 3, 122, 60, 0.0, 1),
    step("writescope", 1, 0, 125, 50, 0.0), step("writescope", 1, 1, 141.5, 999, 0.3),
    step("writescope", 1, 2, 150, 90, 0.3), step("writescope", 2, 0, 155, 85, 0.0),
    step("writescope", 2, 1, 164, 42, 0.3), step("writescope", 2, 2, 170, 40, 0.3),
]
cycle_events = ["writescope,140,load start\n", "writescope,100,load start\n",
                "writescope,120,load end\n", "writescope,160,load end\n"]
out_c = run(cycle_steps, cycle_events)
checks.append((out_c.returncode == 0 and
               "writescope     before   40.0   40.0 n   1 expl  0 | during   85.0   85.0 n   3 "
               "expl  0 | after   42.0   44.0 n   3 expl  0" in out_c.stdout,
               f"two loads: the phases span both (stderr: {out_c.stderr})"))
checks.append(("writescope     load 1: GPU-only 1.00 s into the load; split again 21.50 s after it"
               not in out_c.stdout and
               "writescope     load 1: GPU-only 1.00 s into the load; not split again after it"
               in out_c.stdout and
               "writescope     load 2: GPU-only 15.00 s into the load; split again 4.00 s after it"
               in out_c.stdout and
               "writescope     split again after 1 of 2 loads, median 4.00 s, most 4.00 s"
               in out_c.stdout, "two loads: a reaction per load, none across loads"))
# Starts and ends that do not pair: exit 2.
unpaired = run(cycle_steps, cycle_events[:3])
checks.append((unpaired.returncode == 2 and "2 load starts against 1 ends" in unpaired.stderr,
               f"unpaired loads: exit 2 (got {unpaired.returncode}, {unpaired.stderr!r})"))
overlapping = run(cycle_steps, ["writescope,100,load start\n", "writescope,130,load end\n",
                                "writescope,120,load start\n", "writescope,160,load end\n"])
checks.append((overlapping.returncode == 2 and "load 1 ends at 130" in overlapping.stderr,
               f"overlapping loads: exit 2 ({overlapping.stderr!r})"))

# deploy/contention.sh, with a stand-in trio and wscope (fake_trio.py): its flags checked, and
# an --out that holds an earlier run's CSVs refused (the bench would append to them), before a
# trio starts (exit 2); a run writes the events of its load.
with tempfile.TemporaryDirectory() as tmp:
    root, bin_dir = fake_tree(ROOT, tmp)
    log = os.path.join(tmp, "calls.log")

    def contention(out, *args, bench_s="0"):
        open(log, "w").close()
        return subprocess.run(["bash", os.path.join(root, "deploy", "contention.sh"),
                               "--policies", "writescope", "--bin", bin_dir, "--device", "host",
                               "--out", out, *args], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, FAKE_LOG=log, FAKE_BENCH_S=bench_s))

    for args, why in ((["--before", "x"], "--before must be"),
                      (["--during", "0"], "--during must be"),
                      (["--after", "-1"], "--after must be"),
                      (["--batch", "16x"], "--batch must be"),
                      (["--load-threads", ""], "--load-threads must be"),
                      (["--policies", "bogus"], "unknown policy 'bogus'")):
        refused = contention(os.path.join(tmp, "new"), *args)
        with open(log) as f:
            called = f.read()
        text += refused.stderr
        checks.append((refused.returncode == 2 and why in refused.stderr and not called
                       and not os.path.exists(os.path.join(tmp, "new")),
                       f"contention.sh {' '.join(args)}: refused before a trio (exit 2)"))
    used = os.path.join(tmp, "used")
    os.makedirs(used)
    with open(os.path.join(used, "contention-events.csv"), "w") as f:
        f.write("policy,unix_s,event\nwritescope,1,load start\n")
    refused = contention(used, "--before", "0", "--during", "1")
    with open(log) as f:
        called = f.read()
    text += refused.stderr
    checks.append((refused.returncode == 2 and "already holds contention-events.csv"
                   in refused.stderr and not called, "contention.sh: a used --out refused"))
    fresh = os.path.join(tmp, "fresh")
    ran = contention(fresh, "--before", "0", "--during", "1", bench_s="3")
    text += ran.stdout + ran.stderr
    with open(os.path.join(fresh, "contention-events.csv")) as f:
        events = [line.split(",")[2] for line in f.read().splitlines()[1:]]
    checks.append((ran.returncode == 0 and events == ["load start", "load end"],
                   "contention.sh: a run writes its load's events"))

finish(checks, text, text0, text_r, out_w.stdout, out_m.stdout, held.stdout, out_c.stdout,
       out_reason.stdout, out_rests.stdout)
