#!/usr/bin/env python3
"""Summarize the CSV of `wscope bench` (deploy/gpu-measure.sh bench-grid): per batch size,

  1. the cumulative decode throughput of growing every sequence from the smallest measured
     context to each larger one, integrating the measured step time over the context
     (step time linear between measured contexts: decoding n tokens from c0 takes
     sum over c in [c0, c0 + n) of step(c) ~ the trapezoid integral of step(c) dc), per policy;
  2. WriteScope's speedup over each baseline at every point, marked ~ where the two points'
     p10-p90 step-time ranges overlap (CSVs with the spread columns), and the geometric mean
     over the points at contexts >= --headline-from (default 8192), per baseline and pooled
     over every (point, baseline) ratio (with and without monolithic).

  3. with --ceilings ARCH: the roofline bound of every writescope point from the machine's
     ceilings (pinned H2D, host DRAM, the CPU's matrix rate: --h2d-gbps, --dram-gbps,
     --cpu-tflops, by default the ones docs/measurements.md documents for the H200 machine,
     55.4 GB/s, 81.4 GB/s and 2.59 TFLOP/s, not measured where the CSV ran: the line says
     which it took), beside the measured step. Per layer, with H host tokens (batch x
     (context - the D-window's tokens W: the CSV's window_tokens column, else
     --window-tokens)):
       CPU path  r H a + e   a = max(KV bytes / DRAM, attention FLOPs / CPU rate) per token,
                             e = the point's measured routed-expert time per layer (the
                             experts run on the CPU, after its attention)
       GPU path  (1 - r) H b b = KV bytes / H2D per token (transfers overlap the experts)
       bound = min over r of max(CPU, GPU) = max(e, H b) if e >= H b, else H b (H a + e) / (H (a + b))
     With --host-read-gbps S (ws_probe's host_read_shared: a DRAM read stream and the pinned
     H2D copies at once, added), every byte a step reads from host memory crosses it, whoever
     reads it: the attention's bound is at least its host KV bytes / S, and the step's at
     least all of the step's host bytes / S: every layer's host KV and the weights of the
     routed experts the cpu_worker ran (the CSV's cpu_experts_per_layer; for older CSVs an
     estimate, see cpu_experts_read), no serial rest added (the copies stream under the
     experts and the serial work). The KV streaming slows the CPU experts as both read host
     memory; this is the bound that holds the two to one memory. The line prints what the
     step itself read (those bytes / the step), marked where it is above S: that lease's
     joint read was higher than the one given, and the bound from S is too high there.
     With --probe JSON (ws_probe's file from the lease the CSV ran on), the bound once more
     from that lease's ceilings: its pinned H2D and DRAM triad medians and its joint read
     (leases differ: the split's copies ran at 43 GB/s beside the CPU's attention on one,
     53 on another, runs 150 and 153). --probe given more than once (gpu-grids.sh probes
     before and after its grids): a bound per probe, in the order given (one lease's joint
     read was 114.6 GB/s before a grid and 141.9 after it, runs 159 and 160).
     plus the point's serial rest: the smallest, over the policies measured at the point, of
     step - the larger attention time - the expert wait (projections, norms, merges, logits:
     the same work under every policy). A policy's own rest also holds its waits for the
     later of its two paths in each layer, which a split that balanced its layers would not
     pay, so it is no part of a lower bound (Mixtral 32 x 32K, run 145: writescope's 25.6 ms,
     transfer-all's 14.0, and a second round of writescope at 163.8 ms under a bound of 180.8
     taken with its own). The point's line prints writescope's own rest beside it.
     Where another policy at the point ran the same expert work faster than writescope (the
     KV streaming slows the CPU experts, most likely as host DRAM serves both: writescope's
     took 17-18 % longer than cpu-all's at Mixtral 32 x 32K, runs 239 and 242), the line adds
     the bound with that policy's expert time: what a split would reach if the streaming cost
     the experts nothing. Its own count of points within 1.15x follows the first. Each line
     ends with the most the bound allows over each baseline measured at the point (its step
     / the bound): an aim above that is beyond the roofline at these ceilings.
  4. per point and policy, what the step spends beyond its attention and experts (step - the
     larger attention time - the CPU experts' time): what running the CPU path costs the step
     outside the per-layer model shows as writescope's or cpu-all's excess over transfer-all.
     With CSVs of later benches, writescope's placed CPU share and the share it attended.
  5. per point and policy, the CPU experts' time: the same expert work under every policy, so
     a spread between policies is the trios' (the machine's) or the CPU attention's effect
     on the experts that follow it; the step times carry it either way.
  6. with --ceilings ARCH: the projection to the full model (its layers from
     ../shared/models): per point and policy the step per layer, the full model's step
     (times its layers) and decode tokens/s, and whether the full model's KV at the point
     and its routed experts fit the host's memory (--host-gib, 128 on the GPU machine).

Rows repeated for one (policy, batch, context) (bench-grid.sh --repeats) are averaged, their
p10-p90 ranges joined.

Only the standard library. Usage:
  python3 deploy/bench_report.py docs/runs/h200-run208-grids/gd/bench-deepseek_v2.csv [--headline-from 8192]
  python3 deploy/bench_report.py CSV --ceilings qwen3_moe [--h2d-gbps G] [--dram-gbps G]
      [--cpu-tflops T] [--window-tokens 256] [--host-gib 128] [--host-read-gbps S]
      [--probe probe.json [--probe probe-after.json]]
  python3 deploy/bench_report.py CSV --pool-with OTHER.csv [OTHER.csv ...]
      the pooled geometric means also over the other grids' ratios (other shapes: the
      headline over all of them), each grid's repeats averaged on their own
"""
import argparse
import csv
import json
import math
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import open_text  # noqa: E402,F401  (gzip or plain; share_sweep_report's too)


def steps_path_beside(bench_path):
    """steps-ARCH.csv or steps-ARCH.csv.gz beside bench-ARCH.csv, or None."""
    folder, name = os.path.split(bench_path)
    if not name.startswith("bench-"):
        return None
    for candidate in ("steps-" + name[len("bench-"):], "steps-" + name[len("bench-"):] + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    return None


def load(path):
    """The CSV's rows as dicts. A row whose tokens/s is not a positive number (a point that
    measured nothing) is refused: a message and exit status 2 (merged with its repeats it
    would leave the others' mean, compared it would drop out of the ratios or divide by 0)."""
    rows = []
    with open(path) as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            try:
                tokens_per_s = float(row["tokens_per_s"])
            except (KeyError, TypeError, ValueError) as e:
                raise SystemExit(f"{path}: bad row {row}: {e}")
            if not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
                print(f"bench_report.py: {path}:{line}: {row.get('policy')} batch "
                      f"{row.get('batch')} context {row.get('context')}: tokens_per_s "
                      f"{row['tokens_per_s']!r} is not a positive number (a point that "
                      "measured nothing): rerun it or take its row out", file=sys.stderr)
                sys.exit(2)
            try:
                rows.append({
                    "policy": row["policy"],
                    "batch": int(row["batch"]),
                    "context": int(row["context"]),
                    "tokens_per_s": tokens_per_s,
                    "step_ms": float(row["step_ms"]),
                    # The spread of the point's step times (CSVs of later benches); None before.
                    "p10": float(row["step_ms_p10"]) if row.get("step_ms_p10") else None,
                    "p90": float(row["step_ms_p90"]) if row.get("step_ms_p90") else None,
                    "layers": int(row.get("layers") or 0),
                    "gpu_attention_ms": float(row.get("gpu_attention_ms") or 0),
                    "cpu_attention_ms": float(row.get("cpu_attention_ms") or 0),
                    "expert_wait_ms": float(row.get("gpu_expert_wait_ms") or 0),
                    "cpu_expert_ms": float(row.get("cpu_expert_ms") or 0),
                    "placed_cpu_share": float(row.get("placed_cpu_share") or 0),
                    # The share the CPU attended (CSVs of later benches); None before.
                    "read_cpu_share": float(row["read_cpu_share"]) if row.get("read_cpu_share")
                    else None,
                    # Hot experts on the gpu_worker (CSVs of later benches); 0 before.
                    "hot_expert_ms": float(row.get("gpu_hot_expert_ms") or 0),
                    "hot_pair_share": float(row.get("hot_pair_share") or 0),
                    # The D-window W the trio ran with (CSVs of later benches); None before,
                    # and 0 (never a valid W) reads as unknown too.
                    "window_tokens": (int(row["window_tokens"]) or None)
                    if row.get("window_tokens") else None,
                    # The copy engine's time on the step's KV rounds and the GPU's waits for
                    # the CPU's attention (CSVs of later benches); None before.
                    "transfer_ms": float(row["transfer_ms"]) if row.get("transfer_ms") else None,
                    "gpu_waited_cpu_ms": float(row["gpu_waited_cpu_ms"])
                    if row.get("gpu_waited_cpu_ms") else None,
                    # How the tokens were sampled (CSVs since session 34); greedy before.
                    "sampling": row.get("sampling") or "greedy",
                    # Distinct routed experts per MoE layer and step (CSVs since session 35);
                    # None before.
                    "experts_per_layer": float(row["experts_per_layer"])
                    if row.get("experts_per_layer") else None,
                    # Of them, those the cpu_worker ran (CSVs since session 48); None before.
                    "cpu_experts_per_layer": float(row["cpu_experts_per_layer"])
                    if row.get("cpu_experts_per_layer") else None,
                    # The bench's round and turn of the row (CSVs of later benches); 0 before.
                    "round": int(row.get("round") or 0),
                    "turn": int(row.get("turn") or 0),
                })
            except (KeyError, ValueError) as e:
                raise SystemExit(f"{path}: bad row {row}: {e}")
    return rows


def merge_repeats(rows):
    """One row per (policy, batch, context): the mean of every measured field over the rows
    of that point (bench-grid.sh --repeats runs the policies round-robin, a fresh trio each
    time; tokens/s: the harmonic mean, the throughput of all the repeats' work), with the
    p10-p90 range widened to cover all of them, so that "~" also covers the spread between
    trios; `repeats` counts the rows."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["policy"], r["batch"], r["context"])].append(r)
    merged = []
    for key, group in groups.items():
        out = dict(group[0])
        for field in ("step_ms", "gpu_attention_ms", "cpu_attention_ms", "expert_wait_ms",
                      "cpu_expert_ms", "placed_cpu_share", "hot_expert_ms", "hot_pair_share"):
            out[field] = sum(g[field] for g in group) / len(group)
        # Equal work per repeat: the throughput of all of it is the harmonic mean (load()
        # refuses a row whose tokens/s is not above 0).
        out["tokens_per_s"] = len(group) / sum(1 / g["tokens_per_s"] for g in group)
        for field in ("read_cpu_share", "transfer_ms", "gpu_waited_cpu_ms", "experts_per_layer",
                      "cpu_experts_per_layer"):
            known = [g[field] for g in group if g[field] is not None]
            out[field] = sum(known) / len(known) if known else None
        if all(g["p10"] is not None and g["p90"] is not None for g in group):
            out["p10"] = min(g["p10"] for g in group)
            out["p90"] = max(g["p90"] for g in group)
        windows = {g["window_tokens"] for g in group}
        if len(windows) > 1:
            raise SystemExit(f"{key}: repeats ran with different D-windows {sorted(windows, key=str)}"
                             "; report them apart")
        samplings = {g["sampling"] for g in group}
        if len(samplings) > 1:
            raise SystemExit(f"{key}: repeats sampled differently {sorted(samplings)}; report "
                             "them apart")
        out["repeats"] = len(group)
        merged.append(out)
    return merged


def cumulative_tokens_per_s(points, batch):
    """points: sorted [(context, step_ms)]. Returns [(c1, tokens/s decoding c0 -> c1)]."""
    out = []
    c0 = points[0][0]
    seconds = 0.0
    for (ca, ta), (cb, tb) in zip(points, points[1:]):
        seconds += (cb - ca) * (ta + tb) / 2 / 1e3  # one step per decoded token
        out.append((cb, batch * (cb - c0) / seconds if seconds > 0 else float("nan")))
    return out


def alike_rows(rows):
    """Whether a CSV's greedy rows were alike: before session 35 a bench fed every sequence
    one token over alike KV, so a greedy batch routed like one token (too little expert
    work, the same under every policy). Such CSVs have no experts_per_layer column."""
    return any(r["sampling"] == "greedy" for r in rows) and all(
        r["experts_per_layer"] is None for r in rows)


def alike_rows_note(rows_by_path):
    """A line naming the CSVs of {path: load(path)} whose greedy rows were alike, or ""."""
    old = [path for path, rows in rows_by_path.items() if alike_rows(rows)]
    if not old:
        return ""
    return (f"Note: {', '.join(old)} predate{'s' if len(old) == 1 else ''} session 35: "
            "greedy rows were alike there (a batch routed like one token, so too little expert "
            "work); their ratios are not comparable with later grids'.\n")


def index_points(path):
    """The CSV's points, repeats averaged: {(policy, batch): {context: row}}."""
    rows = load(path)
    if not rows:
        raise SystemExit(f"{path}: no rows")
    by = defaultdict(dict)
    for r in merge_repeats(rows):
        by[(r["policy"], r["batch"])][r["context"]] = r
    return by


def point_ratios(by, batch, context):
    """WriteScope's tokens/s over each baseline's at one point, by baseline name:
    [(policy, ratio, whether their p10-p90 ranges overlap)]."""
    ws = by[("writescope", batch)][context]
    out = []
    for (policy, b), points in sorted(by.items()):
        other = points.get(context)
        if policy == "writescope" or b != batch or other is None or other["tokens_per_s"] <= 0:
            continue
        out.append((policy, ws["tokens_per_s"] / other["tokens_per_s"], spreads_overlap(ws, other)))
    return out


def headline_ratios(by, headline_from):
    """{baseline: [ratio at every writescope point at contexts >= headline_from]}."""
    ratios = defaultdict(list)
    for (policy, batch), points in sorted(by.items()):
        if policy != "writescope":
            continue
        for context in sorted(points):
            if context >= headline_from:
                for baseline, ratio, _ in point_ratios(by, batch, context):
                    ratios[baseline].append(ratio)
    return ratios


def geometric_mean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def spreads_overlap(a, b):
    """Whether two points' p10-p90 step-time ranges overlap (the difference is within the
    run's noise); False when a CSV has no spread."""
    if None in (a["p10"], a["p90"], b["p10"], b["p90"]):
        return False
    return a["p10"] <= b["p90"] and b["p10"] <= a["p90"]


# Per token and layer: KV bytes in the cache, attention FLOPs of one decode query (scores and
# weighted sum; MLA absorbed: every head over the shared latent of kv_lora_rank + rope values,
# output over kv_lora_rank). Per routed expert: its weights' bytes in host memory (bf16, 3
# matrices of hidden x expert intermediate). The leading dense layers (no routed experts).
SHAPES = {
    "qwen3_moe": {"kv_bytes": 2048, "flops": 4 * 32 * 128, "expert_bytes": 3 * 2048 * 768 * 2,
                  "dense_layers": 0},
    "mixtral": {"kv_bytes": 4096, "flops": 4 * 32 * 128, "expert_bytes": 3 * 4096 * 14336 * 2,
                "dense_layers": 0},
    "deepseek_v2": {"kv_bytes": 1152, "flops": 2 * 16 * (576 + 512),
                    "expert_bytes": 3 * 2048 * 1408 * 2, "dense_layers": 1},
}
# The full models (../shared/models): their layers, and the bytes of their routed experts in
# host memory (bf16; MoE layers x experts x 3 matrices x hidden x expert intermediate x 2).
FULL_MODELS = {
    "qwen3_moe": {"name": "Qwen3-30B-A3B", "layers": 48,
                  "expert_bytes": 48 * 128 * 3 * 2048 * 768 * 2},
    "mixtral": {"name": "Mixtral-8x7B", "layers": 32,
                "expert_bytes": 32 * 8 * 3 * 4096 * 14336 * 2},
    # The first of the 27 layers is dense (first_k_dense_replace = 1).
    "deepseek_v2": {"name": "DeepSeek-V2-Lite", "layers": 27,
                    "expert_bytes": 26 * 64 * 3 * 2048 * 1408 * 2},
}
GIB = float(1 << 30)
# The H200 machine's ceilings as docs/measurements.md documents them (ws_probe's pinned H2D and
# DRAM triad, the CPU experts' oneDNN AMX peak): --h2d-gbps, --dram-gbps and --cpu-tflops where
# not given.
DOCUMENTED_CEILINGS = {"h2d_gbps": 55.4, "dram_gbps": 81.4, "cpu_tflops": 2.59}


def own_rest_ms(row):
    """What a policy's step spent beyond its larger attention time and its expert wait."""
    return max(0.0, row["step_ms"] - max(row["gpu_attention_ms"], row["cpu_attention_ms"])
               - row["expert_wait_ms"])


def host_tokens_of(row, window_tokens):
    """A layer's host tokens at the point: batch x (context - W), W the row's own D-window when
    its CSV records one, else window_tokens."""
    if row.get("window_tokens") is not None:
        window_tokens = row["window_tokens"]
    return row["batch"] * max(0, row["context"] - window_tokens)


def cpu_experts_read(row):
    """(routed experts the cpu_worker ran per MoE layer, whether estimated): the CSV's
    cpu_experts_per_layer; before that column, experts_per_layer x (1 - hot_pair_share), off
    where the resident (hot) experts, chosen by the warm-up's counts, took more or fewer than
    an average expert's share of a step's pairs (Mixtral, 2 of 8 experts resident: 6.03 and
    5.92 at 32 x 32K in runs 239 and 242, where all 8 were chosen and the CPU ran 6; 6.17 at
    16 x 32K in run 239, 7.94 chosen); None where the CSV has neither."""
    if row.get("cpu_experts_per_layer") is not None:
        return row["cpu_experts_per_layer"], False
    if row.get("experts_per_layer") is not None:
        return row["experts_per_layer"] * (1 - row.get("hot_pair_share", 0.0)), True
    return None, False


def host_bytes_per_step(row, shape, window_tokens):
    """(KV bytes, CPU expert weight bytes, what the report says of the experts' count: "" where
    the CSV measured it) read from host memory per step: every host KV token of every layer
    (by the CPU in place or by the copies), and the weights of the experts the cpu_worker ran
    in each MoE layer (0 where the CSV does not say)."""
    layers = max(row["layers"], 1)
    host_tokens = host_tokens_of(row, window_tokens)
    experts, estimated = cpu_experts_read(row)
    moe_layers = max(0, layers - shape["dense_layers"])
    expert_bytes = (experts or 0.0) * moe_layers * shape["expert_bytes"]
    note = (" (not in this CSV: none counted)" if experts is None else
            " (their count estimated)" if estimated else "")
    return layers * host_tokens * shape["kv_bytes"], expert_bytes, note


def step_bound_ms(row, shape, h2d_gbps, dram_gbps, cpu_tflops, window_tokens,
                  host_read_gbps=None, rest=None):
    """(attention-only bound, step bound, serial rest) in ms per step for one point. The
    row's own D-window W when its CSV records one, else window_tokens. `rest`: the serial
    rest to add (default: the row's own)."""
    layers = max(row["layers"], 1)
    host_tokens = host_tokens_of(row, window_tokens)
    a = max(shape["kv_bytes"] / dram_gbps, shape["flops"] / (cpu_tflops * 1e3)) * 1e-6  # ms/token
    b = shape["kv_bytes"] / h2d_gbps * 1e-6
    cpu_all, gpu_all = host_tokens * a, host_tokens * b
    e = row["cpu_expert_ms"] / layers
    attention = cpu_all * gpu_all / (cpu_all + gpu_all) if cpu_all + gpu_all > 0 else 0.0
    if e >= gpu_all:
        layer = e
    else:
        layer = gpu_all * (cpu_all + e) / (cpu_all + gpu_all)
    if rest is None:
        rest = own_rest_ms(row)
    step = layers * layer + rest
    if host_read_gbps:
        kv_bytes, expert_bytes, _ = host_bytes_per_step(row, shape, window_tokens)
        attention = max(attention, kv_bytes / layers / host_read_gbps * 1e-6)
        # The copies stream under the experts and the serial work too, so the serial rest is
        # not added to what the host memory takes.
        step = max(step, (kv_bytes + expert_bytes) / host_read_gbps * 1e-6)
    return layers * attention, step, rest


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--headline-from", type=int, default=8192)
    parser.add_argument("--ceilings", choices=sorted(SHAPES),
                        help="the shape of the CSV: print the roofline bound of every writescope point")
    parser.add_argument("--h2d-gbps", type=float, default=None,
                        help="pinned H2D (ws_probe; default: the documented "
                             f"{DOCUMENTED_CEILINGS['h2d_gbps']:g})")
    parser.add_argument("--dram-gbps", type=float, default=None,
                        help="host DRAM triad (ws_probe; default: the documented "
                             f"{DOCUMENTED_CEILINGS['dram_gbps']:g})")
    parser.add_argument("--cpu-tflops", type=float, default=None,
                        help="the CPU's bf16 matrix rate (oneDNN AMX peak, cpu_experts_bench; "
                             f"default: the documented {DOCUMENTED_CEILINGS['cpu_tflops']:g})")
    parser.add_argument("--window-tokens", type=int, default=256,
                        help="D-window tokens per sequence (on the GPU, not streamed), for "
                             "CSVs without a window_tokens column (older benches)")
    parser.add_argument("--host-read-gbps", type=float, default=None,
                        help="host memory read by a CPU stream and the H2D copies at once "
                             "(ws_probe's host_read_shared): a joint ceiling of both paths; "
                             "default: none (the two ceilings apart)")
    parser.add_argument("--probe", metavar="JSON", action="append", default=[],
                        help="ws_probe --json of the lease the CSV ran on (gpu-grids.sh "
                             "writes probe.json and probe-after.json): with --ceilings, one "
                             "more bound from its pinned H2D and DRAM triad medians and its "
                             "host_read_shared; repeatable")
    parser.add_argument("--host-gib", type=float, default=128.0,
                        help="host memory, GiB (the full-model projection's fit; --ceilings)")
    parser.add_argument("--pool-with", nargs="+", default=[], metavar="CSV",
                        help="other grids (other shapes) whose ratios join the pooled means")
    args = parser.parse_args()
    args.given = {name for name in DOCUMENTED_CEILINGS if getattr(args, name) is not None}
    for name, value in DOCUMENTED_CEILINGS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("h2d_gbps", "dram_gbps", "cpu_tflops", "host_gib") + (
            ("host_read_gbps",) if args.host_read_gbps is not None else ()):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    by = index_points(args.csv)  # (policy, batch) -> {context: row}
    note = alike_rows_note({path: load(path) for path in [args.csv] + args.pool_with})
    if note:
        print(note)
    samplings = sorted({r["sampling"] for points in by.values() for r in points.values()})
    if samplings != ["greedy"]:
        print(f"Tokens sampled: {', '.join(samplings)} (the CSV's sampling column).\n")
    most = max(r["repeats"] for points in by.values() for r in points.values())
    if most > 1:
        print(f"Repeated points averaged (up to {most} rows each; the p10-p90 ranges cover "
              "all of them).")
        # A grid whose budget ran out (gpu-grids.sh --budget-s), or a point that failed,
        # leaves some points with fewer rounds: their ratios weigh fewer of the host's phases.
        fewer = [f"{policy} {batch} x {context} ({r['repeats']} of {most})"
                 for (policy, batch), points in sorted(by.items())
                 for context, r in sorted(points.items()) if r["repeats"] < most]
        if fewer:
            print(f"Points with fewer rows: {', '.join(fewer)}.")
        print()
    policies = sorted({p for p, _ in by}, key=lambda p: (p != "writescope", p))
    batches = sorted({b for _, b in by})

    print("Cumulative decode throughput (tokens/s), every sequence decoded from the smallest "
          "measured context:")
    for batch in batches:
        for policy in policies:
            points = sorted((c, r["step_ms"]) for c, r in by.get((policy, batch), {}).items())
            if len(points) < 2:
                continue
            cum = cumulative_tokens_per_s(points, batch)
            print(f"  batch {batch:3d} {policy:14s} " + "  ".join(
                f"{points[0][0]}->{c}: {v:7.1f}" for c, v in cum))

    print("\nWriteScope's speedup (tokens/s ratio) over each baseline, per point "
          "(~: the two p10-p90 step-time ranges overlap):")
    for batch in batches:
        for context in sorted(by.get(("writescope", batch), {})):
            cells = point_ratios(by, batch, context)
            text = ", ".join(f"{policy} {ratio:.2f}x{'~' if overlap else ''}"
                             for policy, ratio, overlap in cells)
            # The best baseline has the smallest ratio.
            vs_best = f"; vs the best baseline {min(r for _, r, _ in cells):.2f}x" if cells else ""
            print(f"  batch {batch:3d} context {context:6d}: " + text + vs_best)

    ratios = headline_ratios(by, args.headline_from)  # baseline -> ratios
    print(f"\nGeometric mean over the points at contexts >= {args.headline_from}:")
    for policy, values in sorted(ratios.items()):
        print(f"  writescope / {policy:14s} {geometric_mean(values):.2f}x over {len(values)} points")
    if not ratios:
        print("  (no points)")

    def pooled(label, ratios, keep):
        """The geometric mean of every (point, baseline) ratio of the baselines `keep` takes."""
        values = [v for policy, vs in ratios.items() if keep(policy) for v in vs]
        if values:
            print(f"  {label:27s} {geometric_mean(values):.2f}x over {len(values)} ratios")

    def pooled_lines(ratios):
        pooled("all baselines", ratios, lambda policy: True)
        if "monolithic" in ratios:
            pooled("all but monolithic", ratios, lambda policy: policy != "monolithic")
    if len(ratios) > 1:
        pooled_lines(ratios)
    if args.pool_with:
        everything = defaultdict(list, {p: list(vs) for p, vs in ratios.items()})
        for path in args.pool_with:
            for policy, values in headline_ratios(index_points(path), args.headline_from).items():
                everything[policy].extend(values)
        print(f"Pooled with {', '.join(args.pool_with)}:")
        pooled_lines(everything)

    def per_point(title, cell):
        """One line per (batch, context): `cell(policy, row)` for every policy measured there."""
        print(title)
        for batch in batches:
            contexts = sorted({c for (p, b), points in by.items() if b == batch for c in points})
            for context in contexts:
                cells = [cell(policy, by[(policy, batch)][context]) for policy in policies
                         if context in by.get((policy, batch), {})]
                print(f"  batch {batch:3d} context {context:6d}: " + ", ".join(cells))

    def beyond(policy, r):
        attention = max(r["gpu_attention_ms"], r["cpu_attention_ms"])
        excess = r["step_ms"] - attention - r["cpu_expert_ms"]
        shares = ""
        if policy == "writescope" and r["read_cpu_share"] is not None:
            shares = f" (attended {r['read_cpu_share']:.2f} of {r['placed_cpu_share']:.2f} placed)"
        return f"{policy} {excess:.2f}{shares}"

    per_point("\nBeyond attention and experts (ms per step: step - the larger attention time - "
              "the CPU experts), per point:", beyond)
    def experts(policy, r):
        text = f"{policy} {r['cpu_expert_ms']:.2f}"
        if r["hot_pair_share"] > 0:
            text += f" + {r['hot_expert_ms']:.2f} GPU ({100 * r['hot_pair_share']:.0f} %)"
        if r["experts_per_layer"] is not None:
            text += f" [{r['experts_per_layer']:.1f}/layer]"
        return text

    per_point("\nThe CPU experts (ms per step; the same expert work under every policy: a spread "
              "is the trios' or the CPU attention's before them; \"+ x GPU (y %)\": the hot "
              "experts' time on the GPU beside them and their share of the pairs; \"[n/layer]\": "
              "the distinct experts a MoE layer's tokens chose), per point:",
              experts)

    def copies(policy, r):
        if r["transfer_ms"] is None:
            return f"{policy} -"
        busy = 100 * r["transfer_ms"] / r["step_ms"] if r["step_ms"] > 0 else float("nan")
        waited = ("" if r["gpu_waited_cpu_ms"] is None
                  else f", GPU waited {r['gpu_waited_cpu_ms']:.2f} for the CPU")
        return f"{policy} {r['transfer_ms']:.2f} ({busy:.0f} %{waited})"

    if any(r["transfer_ms"] is not None for points in by.values() for r in points.values()):
        per_point("\nThe copy engine on the KV rounds (ms per step, and its share of the step: near "
                  "100 % the transfers bound the step) and the GPU's waits for the CPU's attention "
                  "(ms per step, all layers), per point:", copies)

    if args.ceilings:
        print_bound(by, batches, policies, args, ceilings_source(args.given), args.h2d_gbps,
                    args.dram_gbps, args.host_read_gbps)
        cpu_rate = ("the CPU rate as given" if "cpu_tflops" in args.given else
                    "the CPU rate not probed but the documented one")
        for path in args.probe:
            print_bound(by, batches, policies, args, f"this lease's probe ({path}), {cpu_rate}",
                        *lease_ceilings(path))
        print_projection(by, batches, policies, args.ceilings, args.host_gib)
    return 0


def ceilings_source(given):
    """What the flags' bound is from, for its line: the ceilings given (the names in `given`
    of DOCUMENTED_CEILINGS' keys), the documented ones, or some of each."""
    names = {"h2d_gbps": "H2D", "dram_gbps": "DRAM", "cpu_tflops": "CPU"}
    if given == set(DOCUMENTED_CEILINGS):
        return "the ceilings given"
    documented = "the documented ceilings of docs/measurements.md"
    if not given:
        return f"{documented}, not measured here"
    ours = "/".join(names[n] for n in DOCUMENTED_CEILINGS if n in given)
    theirs = "/".join(names[n] for n in DOCUMENTED_CEILINGS if n not in given)
    return f"the ceilings given for {ours} and {documented} for {theirs}, not measured here"


def lease_ceilings(path):
    """(H2D, DRAM, joint host read) in GB/s from ws_probe's JSON: the pinned H2D copies' and
    the DRAM triad's medians (the documented ceilings are medians too) and host_read_shared.
    SystemExit naming the file and the key where one is missing or not a positive number."""
    try:
        with open(path) as f:
            probe = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"bench_report.py: --probe {path}: {e}")
    values = []
    for key, field in (("h2d_pinned", "median_gbps"), ("dram_triad", "median_gbps"),
                       ("host_read_shared", None)):
        value = probe.get(key)
        if field is not None and isinstance(value, dict):
            value = value.get(field)
        if not isinstance(value, (int, float)) or not value > 0:
            sys.exit(f"bench_report.py: --probe {path}: no positive '{key}'"
                     f"{'.' + field if field else ''} in it (a ws_probe --json file with the "
                     "GPU probed)")
        values.append(float(value))
    return tuple(values)


def print_bound(by, batches, policies, args, source, h2d_gbps, dram_gbps, host_read_gbps):
    """The roofline bound of every writescope point from one set of ceilings, beside the
    measured step, and how many points lie within 1.15x of it."""
    shape = SHAPES[args.ceilings]
    shared = ("" if host_read_gbps is None else
              f", host memory read by both at once {host_read_gbps:g} GB/s")
    print(f"\nRoofline bound from {source} ({args.ceilings}: H2D {h2d_gbps:g} GB/s, DRAM "
          f"{dram_gbps:g} GB/s, CPU {args.cpu_tflops:g} TFLOP/s{shared}; the measured "
          f"experts and serial rest included):")
    within = total = 0
    within_fast = total_fast = 0
    for batch in batches:
        for context, r in sorted(by.get(("writescope", batch), {}).items()):
            at_point = [(policy, by[(policy, batch)][context]) for policy in policies
                        if context in by.get((policy, batch), {})]
            least_rest = min(own_rest_ms(row) for _, row in at_point)

            def bound_of(row):  # (attention bound, step bound, serial rest) at these ceilings
                return step_bound_ms(row, shape, h2d_gbps, dram_gbps, args.cpu_tflops,
                                     args.window_tokens, host_read_gbps, least_rest)

            attention, bound, rest = bound_of(r)
            measured_attention = max(r["gpu_attention_ms"], r["cpu_attention_ms"])
            ratio = r["step_ms"] / bound if bound > 0 else float("nan")
            total += 1
            within += ratio <= 1.15
            line = (f"  batch {batch:3d} context {context:6d}: step {r['step_ms']:8.2f} ms, bound "
                    f"{bound:8.2f} ms (step / bound {ratio:.2f}); attention "
                    f"{measured_attention:7.2f} ms, its bound {attention:7.2f} ms; serial rest "
                    f"{rest:6.2f} ms (writescope's own {own_rest_ms(r):6.2f})")
            if host_read_gbps:
                kv_bytes, expert_bytes, note = host_bytes_per_step(r, shape, args.window_tokens)
                # What the step itself read: a lease whose steps read more than the joint
                # read given has a higher ceiling than it (the bound is then too high).
                step_gbps = (kv_bytes + expert_bytes) / (r["step_ms"] * 1e6)
                line += (f"; host memory {kv_bytes / 1e9:.2f} GB of KV + "
                         f"{expert_bytes / 1e9:.2f} GB of CPU experts"
                         f"{note} a step: "
                         f"{(kv_bytes + expert_bytes) / host_read_gbps * 1e-6:.2f} ms, the step "
                         f"read {step_gbps:.1f} GB/s"
                         f"{' (above the joint read given)' if step_gbps > host_read_gbps else ''}")
            fastest, fast_row = min(at_point, key=lambda item: item[1]["cpu_expert_ms"])
            if fast_row["cpu_expert_ms"] < r["cpu_expert_ms"]:
                fast_bound = bound_of(dict(r, cpu_expert_ms=fast_row["cpu_expert_ms"]))[1]
                fast_ratio = r["step_ms"] / fast_bound if fast_bound > 0 else float("nan")
                total_fast += 1
                within_fast += fast_ratio <= 1.15
                line += (f"; with {fastest}'s experts ({fast_row['cpu_expert_ms']:.2f} ms against "
                         f"{r['cpu_expert_ms']:.2f}): bound {fast_bound:8.2f} ms (step / it "
                         f"{fast_ratio:.2f})")
            # What the bound leaves of the aims over the baselines (issue 7: 1.4x over cpu-all
            # and transfer-all at 32 x 32K): no step below it, so no speedup above these.
            over = [(policy, row["step_ms"] / bound) for policy, row in at_point
                    if policy != "writescope" and bound > 0]
            if over:
                line += "; the bound allows at most " + ", ".join(
                    f"{ratio:.2f}x over {policy}" for policy, ratio in over)
            print(line)
    print(f"  within 1.15x of the bound: {within} of {total} points")
    if total_fast:
        print(f"  within 1.15x of the bound with the fastest policy's experts: {within_fast} of "
              f"{total_fast} points where another policy's experts were faster")


def print_projection(by, batches, policies, arch, host_gib):
    """Each point's per-layer step and the full model's step and decode tokens/s from it,
    with whether the full model's KV and routed experts fit the host's memory there."""
    model, shape = FULL_MODELS[arch], SHAPES[arch]
    measured = sorted({r["layers"] for points in by.values() for r in points.values()})
    print(f"\nProjected to the full model ({model['name']}, {model['layers']} layers; measured "
          f"with {', '.join(map(str, measured))}): per layer the measured step / its layers, "
          f"the full step that times {model['layers']}: every layer costing what a measured "
          f"one did on average (no decode step ran more layers), the per-step costs "
          f"(embedding, logits, sampling) over-counted with them; the policies' ratios are the "
          f"measured ones. With more layers the D-window takes more of the GPU KV budget and "
          f"the ping-pong buffers are smaller, so what the streamed share costs is projected "
          f"low (docs/measurements.md, Session 19: the full DeepSeek-V2-Lite). Host memory "
          f"{host_gib:g} GiB against the full model's KV (every "
          f"layer's, the whole context) and its routed experts "
          f"({model['expert_bytes'] / GIB:.1f} GiB):")
    for batch in batches:
        contexts = sorted({c for (p, b), points in by.items() if b == batch for c in points})
        for context in contexts:
            kv = model["layers"] * batch * context * shape["kv_bytes"] / GIB
            need = kv + model["expert_bytes"] / GIB
            fits = ("fits" if need <= host_gib else
                    "does not fit: the full model cannot be served at this point on this host")
            print(f"  batch {batch:3d} context {context:6d}: KV {kv:.1f} GiB + experts = "
                  f"{need:.1f} GiB, {fits}")
            for policy in policies:
                r = by.get((policy, batch), {}).get(context)
                if r is None:
                    continue
                per_layer = r["step_ms"] / max(r["layers"], 1)
                full = per_layer * model["layers"]
                print(f"    {policy:14s} {per_layer:7.3f} ms per layer, {full:8.1f} ms per step, "
                      f"{1000.0 * batch / full:8.1f} tokens/s")


if __name__ == "__main__":
    sys.exit(main())
