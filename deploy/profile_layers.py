#!/usr/bin/env python3
"""Where a traced decode step waits, layer by layer: `wscope profile`'s Chrome trace (the
three processes' spans) read per step and layer.

    deploy/profile_layers.py profile-writescope.json   (or a gzipped one, .json.gz)

For each layer index, medians over the traced steps (ms):
  gpu attn   the gpu_worker's attention span (its streamed KV rounds and GPU attention)
  cpu attn   the cpu_worker's attention span (its KV in place)
  later      which path ended later, and by how much (the other path's wait, which the step
             pays: the layer's merge and experts follow the later one)
  experts    the cpu_worker's routed experts after the layer's attention
  cpu parts  the cpu_worker's attention call in three (traces since session 31): preparing
             (q in the kernels' layout, the work plan), the blocks (the threads' work items),
             the merge of the items' states; "-" where the trace has none
Then per step: its time, the waits summed over its layers (the GPU's for the CPU, the CPU's
for the GPU), and the ping-pong DMA's busy time (the "dma" spans, recorded when the trace
timed the copies). A path whose span is missing in a layer (a policy that runs one path)
counts no wait there.
"""
import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_plot import open_text  # noqa: E402


def load(path):
    with open_text(path) as f:  # docs/runs keeps the traces gzipped (.gz)
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    spans = defaultdict(list)  # (process, name, step, layer) -> [(start_us, dur_us)]
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args", {})
        key = (names.get(e["pid"], str(e["pid"])), e["name"], args.get("step"), args.get("layer"))
        spans[key].append((float(e["ts"]), float(e["dur"])))
    return spans


def first(spans, process, name, step, layer):
    found = spans.get((process, name, step, layer))
    return min(found) if found else None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    args = parser.parse_args()
    try:
        spans = load(args.trace)
    except (OSError, EOFError, ValueError, KeyError) as error:
        print(f"profile_layers.py: cannot read {args.trace}: {error}", file=sys.stderr)
        return 2
    steps = sorted({k[2] for k in spans if k[0] == "gpu_worker" and k[1] == "step"})
    if not steps:
        print(f"profile_layers.py: {args.trace} holds no gpu_worker step spans", file=sys.stderr)
        return 2
    layers = sorted({k[3] for k in spans
                     if k[1] in ("gpu_attention", "cpu_attention") and k[3] is not None
                     and k[3] >= 0})
    dma_us = defaultdict(float)  # per step
    for (process, name, step, _), found in spans.items():
        if process == "gpu_worker" and name == "dma":
            dma_us[step] += sum(d for _, d in found)
    per_layer = defaultdict(lambda: defaultdict(list))
    print(f"{args.trace}: {len(steps)} steps, {len(layers)} layers")
    print("per step (ms): step, the GPU's waits for the CPU and the CPU's for the GPU summed "
          "over its layers, DMA busy")
    for step in steps:
        step_span = first(spans, "gpu_worker", "step", step, -1)
        gpu_waits = cpu_waits = 0.0
        for layer in layers:
            gpu = first(spans, "gpu_worker", "gpu_attention", step, layer)
            cpu = first(spans, "cpu_worker", "cpu_attention", step, layer)
            experts = first(spans, "cpu_worker", "cpu_experts", step, layer)
            row = per_layer[layer]
            for part in ("prepare", "blocks", "merge"):
                found = first(spans, "cpu_worker", f"cpu_attention_{part}", step, layer)
                if found:
                    row[part].append(found[1] / 1e3)
            if gpu:
                row["gpu"].append(gpu[1] / 1e3)
            if cpu:
                row["cpu"].append(cpu[1] / 1e3)
            if experts:
                row["experts"].append(experts[1] / 1e3)
            if gpu and cpu:
                gap = (gpu[0] + gpu[1] - cpu[0] - cpu[1]) / 1e3  # > 0: the GPU ended later
                row["gap"].append(gap)
                if gap > 0:
                    cpu_waits += gap
                else:
                    gpu_waits -= gap
        step_ms = step_span[1] / 1e3 if step_span else float("nan")
        print(f"  step {step}: {step_ms:8.2f}  GPU waited {gpu_waits:7.2f}  CPU waited "
              f"{cpu_waits:7.2f}  DMA {dma_us[step] / 1e3:8.2f}")
    print("per layer (ms, medians over the steps):")
    print("  layer  gpu attn  cpu attn   later by   experts   cpu parts: prepare    blocks     merge")
    for layer in layers:
        row = per_layer[layer]
        med = {k: statistics.median(v) for k, v in row.items() if v}
        later = ""
        if "gap" in med:
            later = f"{'GPU' if med['gap'] > 0 else 'CPU'} {abs(med['gap']):6.2f}"
        cells = [f"{med[k]:9.2f}" if k in med else f"{'-':>9}"
                 for k in ("gpu", "cpu", "experts", "prepare", "blocks", "merge")]
        print(f"  {layer:5d} {cells[0]} {cells[1]}  {later:>10} {cells[2]}            "
              f"{cells[3]} {cells[4]} {cells[5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
