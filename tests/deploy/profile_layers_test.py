#!/usr/bin/env python3
"""deploy/profile_layers.py on a trace whose waits are known."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "profile_layers.py")


def meta(pid, name):
    return {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}


def span(pid, name, step, layer, start_ms, dur_ms):
    return {"name": name, "ph": "X", "pid": pid, "tid": 1, "ts": start_ms * 1e3,
            "dur": dur_ms * 1e3, "args": {"step": step, "layer": layer}}


# Two steps of two layers. Step 1: layer 0's GPU attention ends 3 ms after the CPU's (the CPU
# waits 3), layer 1's 2 ms before it (the GPU waits 2). Step 2: both layers' GPU ends 1 ms
# later. Layer 0's gaps: +3, +1 (median +2: GPU later by 2); layer 1's: -2, +1 (median -0.5).
events = [meta(2, "gpu_worker"), meta(3, "cpu_worker")]
for step, base, gaps in ((1, 0.0, (3.0, -2.0)), (2, 100.0, (1.0, 1.0))):
    events.append(span(2, "step", step, -1, base, 60.0))
    events.append(span(2, "dma", step, 0, base, 20.0))
    events.append(span(2, "dma", step, 1, base + 30, 15.0))
    for layer, gap in enumerate(gaps):
        start = base + 30 * layer
        events.append(span(3, "cpu_attention", step, layer, start, 10.0))
        events.append(span(2, "gpu_attention", step, layer, start, 10.0 + gap))
        events.append(span(3, "cpu_experts", step, layer, start + 12, 4.0 + layer))
        if layer == 0:  # the CPU call's parts, in layer 0 only (layer 1 shows "-")
            events.append(span(3, "cpu_attention_prepare", step, 0, start, 1.0))
            events.append(span(3, "cpu_attention_blocks", step, 0, start + 1, 7.0 + step))
            events.append(span(3, "cpu_attention_merge", step, 0, start + 8 + step, 0.5))
with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "profile.json")
    with open(trace, "w") as f:
        json.dump({"traceEvents": events}, f)
    out = subprocess.run([sys.executable, SCRIPT, trace], capture_output=True, text=True)
    # The same trace gzipped, as docs/runs keeps them.
    with open(trace, "rb") as f, gzip.open(trace + ".gz", "wb") as g:
        g.write(f.read())
    zipped = subprocess.run([sys.executable, SCRIPT, trace + ".gz"], capture_output=True, text=True)
    one_path = os.path.join(tmp, "cpu-all.json")
    with open(one_path, "w") as f:
        json.dump({"traceEvents": [e for e in events if e["name"] != "gpu_attention"]}, f)
    one = subprocess.run([sys.executable, SCRIPT, one_path], capture_output=True, text=True)
    empty_path = os.path.join(tmp, "empty.json")
    with open(empty_path, "w") as f:
        json.dump({"traceEvents": []}, f)
    empty = subprocess.run([sys.executable, SCRIPT, empty_path], capture_output=True, text=True)
    bad = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "missing.json")],
                         capture_output=True, text=True)
text = out.stdout
checks = [
    (out.returncode == 0, "exit 0"),
    (zipped.returncode == 0 and zipped.stdout.replace(".json.gz", ".json") == text,
     "a gzipped trace reads the same"),
    ("2 steps, 2 layers" in text, "counts steps and layers"),
    ("step 1:    60.00  GPU waited    2.00  CPU waited    3.00  DMA    35.00" in text,
     "step 1's waits and DMA"),
    ("step 2:    60.00  GPU waited    0.00  CPU waited    2.00  DMA    35.00" in text,
     "step 2's waits"),
    ("      0     12.00     10.00  GPU   2.00      4.00" in text, "layer 0's medians"),
    ("      1      9.50     10.00  CPU   0.50      5.00" in text, "layer 1's medians"),
    ("4.00                 1.00      8.50      0.50" in text,
     "layer 0's CPU parts (blocks: the median of 8 and 9)"),
    ("5.00                    -         -         -" in text, "layer 1 has no CPU parts"),
    (one.returncode == 0 and "      0         -     10.00" in one.stdout,
     "a path without spans shows '-' and no wait"),
    (empty.returncode == 2 and "no gpu_worker step spans" in empty.stderr, "an empty trace"),
    (bad.returncode == 2 and "cannot read" in bad.stderr, "a missing file"),
]
finish(checks, text, one.stdout)
