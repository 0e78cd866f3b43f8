#!/usr/bin/env python3
"""deploy/bench_report.py on a CSV whose answers are known: the integration of step time over
the context and the geometric mean of the speedups; the roofline bound, its line naming where
its ceilings came from; rows that measured nothing refused with exit status 2."""
import json
import re
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
HEADER = ("policy,layers,batch,context,steps,tokens_per_s,step_ms,gpu_attention_ms,"
          "cpu_attention_ms,gpu_expert_wait_ms,cpu_expert_ms,target_cpu_share,"
          "placed_cpu_share,optimal_cpu_share,bound_attention_ms,step_ms_p10,step_ms_p50,"
          "step_ms_p90\n")


def row(policy, batch, context, step_ms, spread=0.05):
    """A point whose steps range over step_ms * (1 -/+ spread)."""
    lo, hi = step_ms * (1 - spread), step_ms * (1 + spread)
    return (f"{policy},4,{batch},{context},8,{batch * 1e3 / step_ms:.3f},{step_ms},0,0,0,0,0,0,0,"
            f"0,{lo},{step_ms},{hi}\n")


def run_report(csv_text, *args, check=True):
    """bench_report.py over a temporary CSV that holds csv_text (the process's result)."""
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(csv_text)
        path = f.name
    try:
        return subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"),
                               path, *args], capture_output=True, text=True, check=check)
    finally:
        os.unlink(path)


with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    f.write(HEADER)
    # writescope: 10 ms at 2K, 30 ms at 8K -> 2K..8K takes 6144 * 20 ms = 122.88 s for
    # 4 * 6144 tokens: 200 tokens/s. The baseline is twice as slow everywhere.
    f.write(row("writescope", 4, 2048, 10))
    f.write(row("writescope", 4, 8192, 30))
    f.write(row("transfer-all", 4, 2048, 20))
    f.write(row("transfer-all", 4, 8192, 60))
    # cpu-all: 4x slower at 8K only.
    f.write(row("cpu-all", 4, 2048, 10.5))  # within the noise of writescope's 10 ms
    f.write(row("cpu-all", 4, 8192, 120))
    path = f.name
try:
    out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"), path,
                          "--headline-from", "8192"], capture_output=True, text=True, check=True)
finally:
    os.unlink(path)
text = out.stdout
checks = [
    ("writescope     2048->8192:   200.0" in text, "cumulative throughput of writescope"),
    ("transfer-all   2048->8192:   100.0" in text, "cumulative throughput of transfer-all"),
    ("writescope / transfer-all   2.00x over 1 points" in text, "geomean vs transfer-all"),
    ("writescope / cpu-all        4.00x over 1 points" in text, "geomean vs cpu-all"),
    ("  all baselines               2.83x over 2 ratios" in text, "geomean over all baselines"),
    ("all but monolithic" not in text, "no monolithic line without monolithic"),
    ("cpu-all 1.05x~" in text, "2K: within the spread"),
    ("transfer-all 2.00x," in text or "transfer-all 2.00x;" in text, "2K: outside the spread"),
]

# Repeated points (bench-grid.sh --repeats): the rows of a point are averaged (tokens/s as
# the harmonic mean: the throughput of all the repeats' work) and their p10-p90 ranges
# joined. writescope at 8K: 20 and 40 ms (200 and 100 tokens/s: 133.3) against
# transfer-all's 60 ms (66.7): 2.00x. At 2K writescope's repeats took 10 and 12 ms (ranges
# 9.5-10.5 and 11.4-12.6, joined 9.5-12.6): cpu-all's 13 ms (12.35-13.65) overlaps only the
# joined range.
with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    f.write(HEADER)
    for step in (20, 40):
        f.write(row("writescope", 4, 8192, step))
    f.write(row("writescope", 4, 2048, 10))
    f.write(row("writescope", 4, 2048, 12))
    f.write(row("transfer-all", 4, 8192, 60))
    f.write(row("transfer-all", 4, 2048, 20))
    f.write(row("cpu-all", 4, 2048, 13))
    # monolithic at 8K: 15 ms (266.7 tokens/s), twice writescope's 133.3: 0.50x.
    f.write(row("monolithic", 4, 8192, 15))
    path = f.name
try:
    repeated = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"),
                               path, "--headline-from", "8192"], capture_output=True, text=True,
                              check=True).stdout
finally:
    os.unlink(path)
checks += [
    ("Repeated points averaged (up to 2 rows each" in repeated, "repeats: announced"),
    ("Points with fewer rows: cpu-all 4 x 2048 (1 of 2), monolithic 4 x 8192 (1 of 2), "
     "transfer-all 4 x 2048 (1 of 2), transfer-all 4 x 8192 (1 of 2)." in repeated,
     "repeats: the points with fewer rows named"),
    ("writescope / transfer-all   2.00x over 1 points" in repeated, "repeats: averaged"),
    # At 8K: 2.00x over transfer-all and 0.50x over monolithic.
    ("  all baselines               1.00x over 2 ratios" in repeated, "pooled over all"),
    ("  all but monolithic          2.00x over 1 ratios" in repeated, "pooled without monolithic"),
    # 2K: 2 / (1/400 + 1/333.3) = 363.6 tokens/s against 307.7: 1.18x, within the noise.
    ("cpu-all 1.18x~" in repeated, "repeats: the joined ranges overlap"),
    ("The CPU experts (ms per step" in repeated, "repeats: the experts section"),
]

# Hot experts (CSVs with their columns): the experts section shows the GPU's share beside
# the CPU's time; rows without them show the CPU's time alone.
with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    f.write(HEADER.rstrip("\n") + ",read_cpu_share,explore_steps,gpu_hot_expert_ms,hot_pair_share\n")
    f.write(row("writescope", 4, 8192, 30).rstrip("\n") + ",0.3,0,0.92,0.42\n")
    f.write(row("transfer-all", 4, 8192, 60).rstrip("\n") + ",0,0,0,0\n")
    path = f.name
try:
    hot = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"), path],
                         capture_output=True, text=True, check=True).stdout
finally:
    os.unlink(path)
checks += [
    ("writescope 0.00 + 0.92 GPU (42 %)" in hot, "hot experts shown"),
    ("transfer-all 0.00\n" in hot, "no hot text without them"),
]

# The roofline bound from the ceilings, on numbers chosen to be round: 2048 KV bytes per
# token at 2.048 GB/s either way is 1 us per token; 1256 tokens minus the 256-token window
# is 1000 host tokens, so a layer's CPU-all and GPU-all attention are both 1 ms. The experts
# take 2 ms per step (0.5 ms per layer, after the CPU's attention): the best split gives
# max(r + 0.5, 1 - r) = 0.75 ms per layer, 3 ms for 4 layers; attention alone 0.5 per layer.
# The serial rest is 6 - max(1.5, 1.0) - 0.5 = 4 ms; bound 7 ms; step / bound 6 / 7 = 0.86.
with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    f.write(HEADER)
    f.write("writescope,4,1,1256,8,166.667,6.0,1.5,1.0,0.5,2.0,0.5,0.5,0.5,0,5.7,6.0,6.3\n")
    path = f.name
try:
    out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"), path,
                          "--ceilings", "qwen3_moe", "--h2d-gbps", "2.048", "--dram-gbps", "2.048",
                          "--cpu-tflops", "1000"], capture_output=True, text=True, check=True)
    # The projection to Qwen3-30B-A3B's 48 layers on a host of 50 GiB: its routed experts
    # alone take 54 GiB.
    small_host = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"),
                                 path, "--ceilings", "qwen3_moe", "--host-gib", "50"],
                                capture_output=True, text=True, check=True).stdout
    # A joint host-memory ceiling of 1.024 GB/s: 1000 tokens x 2048 bytes take 2 ms per layer
    # whoever reads them, 8 ms for 4 layers (attention 8), above the split's 3 + the rest's 4:
    # the bound is 8 ms (the copies stream under the serial rest, so it is not added; this CSV
    # does not say which experts the CPU ran, so no expert weights count); at 3.0 GB/s (2.73
    # ms a step) the bound stays 7 ms.
    def joint(gbps):
        return subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"),
                               path, "--ceilings", "qwen3_moe", "--h2d-gbps", "2.048",
                               "--dram-gbps", "2.048", "--cpu-tflops", "1000",
                               "--host-read-gbps", gbps],
                              capture_output=True, text=True, check=True).stdout
    joint_low, joint_high = joint("1.024"), joint("3.0")

    # --probe: the lease's ceilings from ws_probe's JSON (the medians and the joint read),
    # a second bound beside the one from the flags' ceilings.
    def with_probe(*probes):
        names = []
        for probe in probes:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as j:
                json.dump(probe, j)
            names.append(j.name)
        try:
            return subprocess.run(
                [sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"), path,
                 "--ceilings", "qwen3_moe", "--h2d-gbps", "2.048", "--dram-gbps", "2.048",
                 "--cpu-tflops", "1000"] + [arg for name in names for arg in ("--probe", name)],
                capture_output=True, text=True)
        finally:
            for name in names:
                os.unlink(name)
    def probe(joint):
        return {"h2d_pinned": {"best_gbps": 9.0, "median_gbps": 2.048},
                "dram_triad": {"best_gbps": 9.0, "median_gbps": 2.048},
                "host_read_shared": joint}
    lease = with_probe(probe(1.024))
    # Probed before and after the grids: a bound per probe, in the order given.
    before_after = with_probe(probe(1.024), probe(3.0))
    no_joint = with_probe({"h2d_pinned": {"median_gbps": 2.048},
                           "dram_triad": {"median_gbps": 2.048}})
finally:
    os.unlink(path)
bound_text = out.stdout
text += bound_text
checks += [
    ("bound     7.00 ms (step / bound 0.86)" in bound_text, "step bound"),
    ("its bound    2.00 ms; serial rest   4.00 ms" in bound_text, "attention bound and rest"),
    ("within 1.15x of the bound: 1 of 1 points" in bound_text, "count within 1.15x"),
    # 6 ms over 4 layers: 1.5 ms per layer, 72 ms for 48, 1 sequence: 13.9 tokens/s. KV: 48
    # layers x 1256 tokens x 2048 bytes = 0.1 GiB; the experts 48 x 128 x 3 x 2048 x 768 x 2.
    ("Projected to the full model (Qwen3-30B-A3B, 48 layers; measured with 4)" in bound_text,
     "the projection names the model and the measured layers"),
    ("writescope       1.500 ms per layer,     72.0 ms per step,     13.9 tokens/s" in bound_text,
     "per layer, the full step and its tokens/s"),
    ("context   1256: KV 0.1 GiB + experts = 54.1 GiB, fits" in bound_text, "fits the host"),
    ("54.1 GiB, does not fit" in small_host, "does not fit a smaller host"),
    ("bound     8.00 ms (step / bound 0.75)" in joint_low
     and "its bound    8.00 ms" in joint_low
     and "host memory read by both at once 1.024 GB/s" in joint_low
     and "host memory 0.01 GB of KV + 0.00 GB of CPU experts (not in this CSV: none counted) a "
     "step: 8.00 ms, the step read "
     "1.4 GB/s (above the joint read given)\n" in joint_low,
     "a joint host-memory ceiling below the split's raises the bound"),
    ("bound     7.00 ms (step / bound 0.86)" in joint_high, "a joint ceiling above it does not"),
    (lease.returncode == 0
     and lease.stdout.index("Roofline bound from the ceilings") < lease.stdout.index("bound     7.00 ms")
     < lease.stdout.index("Roofline bound from this lease's probe") < lease.stdout.index("bound     8.00 ms")
     and "host memory read by both at once 1.024 GB/s" in lease.stdout,
     "--probe: the lease's bound (its medians, its joint read) after the ceilings' own"),
    (before_after.returncode == 0
     and before_after.stdout.count("Roofline bound from this lease's probe") == 2
     and before_after.stdout.index("bound     8.00 ms")
     < before_after.stdout.index("bound     7.00 ms (step / bound 0.86)",
                                 before_after.stdout.index("bound     8.00 ms")),
     "--probe twice: a bound per probe, in the order given"),
    (no_joint.returncode != 0 and "no positive 'host_read_shared'" in no_joint.stderr,
     "--probe: a probe without the joint read is refused, naming the key"),
]

def bound_beside(other_row):
    """The report, at the round ceilings above, of the round writescope point and one other
    policy's row at it."""
    return run_report(
        HEADER + "writescope,4,1,1256,8,166.667,6.0,1.5,1.0,0.5,2.0,0.5,0.5,0.5,0,5.7,6.0,6.3\n"
        + other_row, "--ceilings", "qwen3_moe", "--h2d-gbps", "2.048", "--dram-gbps", "2.048",
        "--cpu-tflops", "1000").stdout


# The serial rest is the smallest of the policies' at the point: transfer-all's 5 - 2.0 - 0.5
# = 2.5 ms against writescope's own 4 (which holds its waits for the later path): bound 3 +
# 2.5 = 5.5 ms, step / bound 6 / 5.5 = 1.09.
least_rest = bound_beside("transfer-all,4,1,1256,8,200.0,5.0,2.0,0.0,0.5,2.0,0,0,0.5,0,4.8,5.0,5.2\n")
text += least_rest
checks += [
    ("bound     5.50 ms (step / bound 1.09)" in least_rest
     and "serial rest   2.50 ms (writescope's own   4.00)" in least_rest,
     "the serial rest is the least of the policies' at the point"),
]

# The CPU experts' weights in the joint host-memory bound: 2 experts per MoE layer on the
# cpu_worker, 4 MoE layers of Qwen3 (9437184 bytes an expert): 75.50 MB a step beside the KV's
# 8.19 MB, 83.69 MB at 10 GB/s: 8.37 ms, above the split's 7 (at 100 GB/s, 0.84 ms: 7 stays).
# The 6-ms step read 83.69 MB: 13.9 GB/s, above a joint read of 10 (flagged: the lease's
# ceiling is higher than the one given), below one of 100.
# Without the column, experts_per_layer x (1 - hot_pair_share) = 4 x 0.5 stands in for it,
# said as estimated; without a joint ceiling the experts' bytes do not enter the bound.
E_HEADER = (HEADER.rstrip("\n") + ",gpu_hot_expert_ms,hot_pair_share,experts_per_layer,"
            "cpu_experts_per_layer\n")
E_ROW = "writescope,4,1,1256,8,166.667,6.0,1.5,1.0,0.5,2.0,0.5,0.5,0.5,0,5.7,6.0,6.3,0.1,0.5,4.0,"
ceilings = ("--ceilings", "qwen3_moe", "--h2d-gbps", "2.048", "--dram-gbps", "2.048",
            "--cpu-tflops", "1000")
experts_counted = run_report(E_HEADER + E_ROW + "2.0\n", *ceilings, "--host-read-gbps", "10").stdout
experts_estimated = run_report(E_HEADER + E_ROW + "\n", *ceilings, "--host-read-gbps", "10").stdout
experts_fast_memory = run_report(E_HEADER + E_ROW + "2.0\n", *ceilings,
                                 "--host-read-gbps", "100").stdout
experts_no_joint = run_report(E_HEADER + E_ROW + "2.0\n", *ceilings).stdout
text += experts_counted + experts_estimated
checks += [
    ("bound     8.37 ms (step / bound 0.72)" in experts_counted
     and "host memory 0.01 GB of KV + 0.08 GB of CPU experts a step: 8.37 ms, the step read "
     "13.9 GB/s (above the joint read given)" in experts_counted,
     "the CPU experts' weights count in the joint host-memory bound"),
    ("bound     8.37 ms" in experts_estimated
     and "0.08 GB of CPU experts (their count estimated) a step" in experts_estimated,
     "without cpu_experts_per_layer the count is estimated from the hot pairs' share, and said so"),
    ("bound     7.00 ms" in experts_fast_memory and "bound     7.00 ms" in experts_no_joint
     and "host memory 0.01" not in experts_no_joint,
     "a joint ceiling above the host bytes, or none, leaves the bound"),
    ("the step read 13.9 GB/s\n" in experts_fast_memory,
     "a step that read less than the joint read given is not flagged"),
]

# Another policy ran the experts faster (cpu-all: 1.0 ms a step against writescope's 2.0; its
# own rest 8 - 4 - 0.5 = 3.5 is the least): the bound as before, with writescope's experts
# (0.75 ms a layer: 3 + 3.5 = 6.5 ms, step / bound 0.92), then with cpu-all's (0.25 ms a
# layer: max(r + 0.25, 1 - r) = 0.625, 2.5 + 3.5 = 6.0 ms, step / it 1.00). With no faster
# policy (the least-rest case above) the line adds nothing.
fast_experts = bound_beside("cpu-all,4,1,1256,8,125.0,8.0,0,4.0,0.5,1.0,1,1,1,0,7.8,8.0,8.2\n")
text += fast_experts
checks += [
    ("bound     6.50 ms (step / bound 0.92)" in fast_experts
     and "with cpu-all's experts (1.00 ms against 2.00): bound     6.00 ms (step / it 1.00)"
     in fast_experts
     and "within 1.15x of the bound with the fastest policy's experts: 1 of 1 points"
     in fast_experts,
     "the bound again with the fastest policy's expert time"),
    # cpu-all's 8-ms step over the 6.5-ms bound: no split step is below it, so 1.23x at most.
    ("; the bound allows at most 1.23x over cpu-all\n" in fast_experts
     and "the bound allows" not in bound_text,
     "the most the bound allows over each baseline at the point, none without baselines"),
    ("with " not in least_rest.split("Roofline")[1].split("within")[0]
     and "fastest policy" not in least_rest,
     "no second bound where no policy ran the experts faster"),
]

# A CSV that records the trio's D-window (window_tokens): W=756 leaves 500 host tokens of the
# 1256, 0.5 ms per layer either way; the experts' 0.5 ms per layer then bound the layer
# (e >= H b): 2 ms for 4 layers + the rest's 4 = 6 ms, whatever --window-tokens says.
# W=0 is never a trio's window: it reads as unknown, so --window-tokens (756) sets the host
# tokens and the bound is the same 6 ms. Repeats of one point at different windows are refused.
W_HEADER = (HEADER.rstrip("\n") + ",read_cpu_share,explore_steps,gpu_hot_expert_ms,"
            "hot_pair_share,window_tokens\n")
W_ROW = ("writescope,4,1,1256,8,166.667,6.0,1.5,1.0,0.5,2.0,0.5,0.5,0.5,0,5.7,6.0,6.3,"
         "0.5,0,0,0,")
W_CEILINGS = ("--ceilings", "qwen3_moe", "--h2d-gbps", "2.048", "--dram-gbps", "2.048",
              "--cpu-tflops", "1000")
own_window = run_report(W_HEADER + W_ROW + "756\n", *W_CEILINGS, "--window-tokens", "256").stdout
zero_window = run_report(W_HEADER + W_ROW + "0\n", *W_CEILINGS, "--window-tokens", "756").stdout
mixed = run_report(W_HEADER + W_ROW + "756\n" + W_ROW + "128\n", check=False)
text += own_window + zero_window
checks += [
    ("bound     6.00 ms (step / bound 1.00)" in own_window
     and "its bound    1.00 ms" in own_window, "the CSV's own D-window sets the host tokens"),
    ("bound     6.00 ms (step / bound 1.00)" in zero_window, "W=0 in the CSV reads as unknown"),
    (mixed.returncode != 0 and "different D-windows" in mixed.stderr,
     "repeats at different D-windows are refused"),
]
# Repeats of one point sampled differently (the CSV's sampling column, session 34) are refused
# too; alike, they merge.
S_HEADER = W_HEADER.rstrip("\n") + ",sampling\n"
sampled = run_report(S_HEADER + W_ROW + "756,greedy\n" + W_ROW + "756,t0.7/k0/p0.9/lp0\n",
                     check=False)
same = run_report(S_HEADER + W_ROW + "756,t0.7/k0/p0.9/lp0\n" + W_ROW + "756,t0.7/k0/p0.9/lp0\n",
                  check=False)
checks += [
    (sampled.returncode != 0 and "sampled differently" in sampled.stderr
     and "Traceback" not in sampled.stderr, "repeats sampled differently are refused"),
    (same.returncode == 0 and "Repeated points averaged (up to 2 rows" in same.stdout
     and "Tokens sampled: t0.7/k0/p0.9/lp0" in same.stdout, "repeats sampled alike merge"),
    ("Tokens sampled" not in own_window, "greedy CSVs say nothing of sampling"),
]

# Beyond attention and experts: step 6.0 - max(1.5, 1.0) - 2.0 = 2.50 ms; with a
# read_cpu_share column, writescope's attended and placed shares.
with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    f.write(HEADER.rstrip("\n") + ",read_cpu_share,explore_steps\n")
    f.write("writescope,4,1,1256,8,166.667,6.0,1.5,1.0,0.5,2.0,0.5,0.4,0.5,0,5.7,6.0,6.3,0.25,1\n")
    f.write("transfer-all,4,1,1256,8,200.0,5.0,3.0,0.0,0.5,1.5,0,0,0,0,4.7,5.0,5.3,0,0\n")
    path = f.name
try:
    out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"), path],
                         capture_output=True, text=True, check=True)
finally:
    os.unlink(path)
text += out.stdout
checks += [
    ("writescope 2.50 (attended 0.25 of 0.40 placed), transfer-all 0.50" in out.stdout,
     "beyond attention and experts, with the shares"),
]

# The copy engine: two repeats of writescope (5.4 and 6.0 ms of DMA in 6.0 ms steps: 5.70 ms,
# 95 %; the GPU waited 0.2 and 0.4 ms for the CPU: 0.30), transfer-all's 3.0 of 5.0 (60 %,
# no wait column value: it waited 0), and a policy from a CSV row without the columns: "-".
out = run_report(W_HEADER.rstrip("\n") + ",transfer_ms,gpu_waited_cpu_ms\n"
                 + W_ROW + "756,5.4,0.2\n" + W_ROW + "756,6.0,0.4\n"
                 + "transfer-all,4,1,1256,8,200.0,5.0,3.0,0.0,0.5,1.5,0,0,0,0,4.7,5.0,5.3,0,0,0,0,"
                 "756,3.0,0\n"
                 + "cpu-all,4,1,1256,8,200.0,5.0,0.0,3.0,0.5,1.5,1,1,1,0,4.7,5.0,5.3,1,0,0,0,756,,\n"
                 ).stdout
text += out
checks += [
    ("The copy engine on the KV rounds" in out
     and "writescope 5.70 (95 %, GPU waited 0.30 for the CPU)" in out
     and "transfer-all 3.00 (60 %, GPU waited 0.00 for the CPU)" in out
     and "cpu-all -" in out, "the copy engine's time per step, its share and the waits"),
]
no_columns = run_report(W_HEADER + W_ROW + "756\n").stdout
checks.append(("The copy engine" not in no_columns, "no copy-engine lines without the columns"))
checks.append((re.search(r"\[[0-9.]+/layer\]", no_columns) is None,
               "no experts per layer without the column"))

# The distinct experts per MoE layer (since session 35): two repeats of writescope, 12.0 and
# 13.0: 12.5; a transfer-all row without a value prints none.
out = run_report(W_HEADER.rstrip("\n") + ",transfer_ms,gpu_waited_cpu_ms,sampling,"
                 "experts_per_layer\n"
                 + W_ROW + "756,5.4,0.2,greedy,12.0\n" + W_ROW + "756,6.0,0.4,greedy,13.0\n"
                 + "transfer-all,4,1,1256,8,200.0,5.0,3.0,0.0,0.5,1.5,0,0,0,0,4.7,5.0,5.3,0,0,0,0,"
                 "756,3.0,0,greedy,\n").stdout
text += out
checks.append(("predates session 35" in no_columns and "predates session 35" not in out,
               "CSVs without the experts per layer (greedy rows alike) are named as such"))
checks.append(("writescope 2.00 [12.5/layer], transfer-all 1.50\n" in out,
               "the experts per MoE layer beside the CPU experts, averaged over repeats"))

# Pooled over grids of other shapes (--pool-with): the first grid's ratios at 8K are 2 over
# transfer-all and 0.5 over monolithic; the second's (two repeats of writescope, 20 and 40 ms:
# 133.3 tokens/s) 8 over transfer-all (16.67 tokens/s) and 2 over monolithic. All four:
# (2 * 0.5 * 8 * 2)^(1/4) = 2.00x; without monolithic (2 * 8)^(1/2) = 4.00x. Its 2K point
# (below --headline-from) stays out.
paths = []
for rows in ([row("writescope", 4, 8192, 30), row("transfer-all", 4, 8192, 60),
              row("monolithic", 4, 8192, 15)],
             [row("writescope", 4, 8192, 20), row("writescope", 4, 8192, 40),
              row("transfer-all", 4, 8192, 240), row("monolithic", 4, 8192, 60),
              row("writescope", 4, 2048, 10), row("transfer-all", 4, 2048, 1000)]):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(HEADER)
        f.writelines(rows)
        paths.append(f.name)
try:
    out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"),
                          paths[0], "--pool-with", paths[1]], capture_output=True, text=True,
                         check=True).stdout
finally:
    for path in paths:
        os.unlink(path)
text += out
pooled_part = out.split("Pooled with", 1)[-1]
checks += [
    ("  all baselines               1.00x over 2 ratios" in out, "pool: the first grid's own"),
    ("Pooled with" in out and "  all baselines               2.00x over 4 ratios" in pooled_part,
     "pool: all four ratios"),
    ("  all but monolithic          4.00x over 2 ratios" in pooled_part,
     "pool: without monolithic"),
]

# Where the ceilings come from, on the line of the bound: the documented ones unless given
# (not measured where the CSV ran), some of each, and beside a lease's probe, whose H2D and
# DRAM are measured, a CPU rate it did not probe.
ONE_POINT = HEADER + "writescope,4,1,1256,8,166.667,6.0,1.5,1.0,0.5,2.0,0.5,0.5,0.5,0,5.7,6.0,6.3\n"
documented = run_report(ONE_POINT, "--ceilings", "qwen3_moe").stdout
some = run_report(ONE_POINT, "--ceilings", "qwen3_moe", "--h2d-gbps", "2.048").stdout
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as j:
    json.dump({"h2d_pinned": {"median_gbps": 2.048}, "dram_triad": {"median_gbps": 2.048},
               "host_read_shared": 3.0}, j)
try:
    probed = run_report(ONE_POINT, "--ceilings", "qwen3_moe", "--probe", j.name).stdout
    probed_cpu = run_report(ONE_POINT, "--ceilings", "qwen3_moe", "--probe", j.name,
                            "--cpu-tflops", "1000").stdout
finally:
    os.unlink(j.name)
text += documented + some + probed
checks += [
    ("Roofline bound from the documented ceilings of docs/measurements.md, not measured here "
     "(qwen3_moe: H2D 55.4 GB/s, DRAM 81.4 GB/s, CPU 2.59 TFLOP/s" in documented,
     "the documented ceilings named as such where none is given"),
    ("Roofline bound from the ceilings given (" in lease.stdout,
     "the ceilings given named as such"),
    ("Roofline bound from the ceilings given for H2D and the documented ceilings of "
     "docs/measurements.md for DRAM/CPU, not measured here (qwen3_moe: H2D 2.048 GB/s, DRAM "
     "81.4 GB/s" in some, "some ceilings given, the others documented"),
    (f"Roofline bound from this lease's probe ({j.name}), the CPU rate not probed but the "
     "documented one (qwen3_moe: H2D 2.048 GB/s, DRAM 2.048 GB/s, CPU 2.59 TFLOP/s" in probed,
     "a probe's bound says its CPU rate was not probed"),
    (f"probe ({j.name}), the CPU rate as given (qwen3_moe: H2D 2.048 GB/s, DRAM 2.048 GB/s, "
     "CPU 1000 TFLOP/s" in probed_cpu, "a probe's bound with the CPU rate given"),
]

# A row that measured nothing (tokens/s 0, negative or NaN) is refused with exit status 2,
# whichever policy and wherever it is: alone, as one of a point's repeats (the merge kept the
# first repeat's throughput) or a baseline's (its ratio dropped out).
for label, rows in (("writescope at 0", [row("writescope", 4, 8192, 30).replace(
                        "133.333", "0"), row("transfer-all", 4, 8192, 60)]),
                    ("a repeat at NaN", [row("writescope", 4, 8192, 30),
                                         row("writescope", 4, 8192, 30).replace("133.333", "nan"),
                                         row("transfer-all", 4, 8192, 60)]),
                    ("a baseline below 0", [row("writescope", 4, 8192, 30),
                                            row("transfer-all", 4, 8192, 60).replace(
                                                "66.667", "-66.667")])):
    assert any(r.split(",")[5] in ("0", "nan", "-66.667") for r in rows), label
    for args in ((), ("--ceilings", "qwen3_moe")):
        refused = run_report(HEADER + "".join(rows), *args, check=False)
        text += refused.stderr
        checks.append((refused.returncode == 2 and "is not a positive number" in refused.stderr
                       and "Traceback" not in refused.stderr and not refused.stdout,
                       f"{label}{' with --ceilings' if args else ''}: refused with exit 2"))

bad = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"), "x.csv",
                      "--ceilings", "qwen3_moe", "--h2d-gbps", "0"], capture_output=True, text=True)
checks.append((bad.returncode != 0 and "must be > 0" in bad.stderr, "a zero ceiling is refused"))
bad_joint = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "bench_report.py"),
                            "x.csv", "--ceilings", "qwen3_moe", "--host-read-gbps", "-1"],
                           capture_output=True, text=True)
checks.append((bad_joint.returncode != 0 and "--host-read-gbps must be > 0" in bad_joint.stderr,
               "a negative joint ceiling is refused"))

finish(checks, text)
