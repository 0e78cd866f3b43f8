#!/usr/bin/env python3
"""deploy/compare_generations.py on small generations: the same tokens within the tolerance
pass; a log-probability beyond it fails; a difference at a near tie passes and at a clear
choice fails; one generation stopping early fails; a NaN log-probability fails; bad input
(no file, no log-probabilities, a failed generation, lengths that disagree) exits 2."""
import json
import os
import subprocess
import sys
import tempfile

from checks import finish

ROOT = sys.argv[1]
SCRIPT = os.path.join(ROOT, "deploy", "compare_generations.py")


def generation(tokens, logprobs, gaps):
    """wscope generate --json's fields: each token with its log-probability, and its
    alternatives: itself, then a runner-up `gap` below."""
    top = [[[t, lp], [t + 1, lp - gap]] for t, lp, gap in zip(tokens, logprobs, gaps)]
    return {"request_id": "r", "tokens": tokens, "logprobs": logprobs, "top_logprobs": top,
            "finish_reason": "length"}


def run(d, a, b, *flags):
    paths = []
    for name, data in (("a", a), ("b", b)):
        path = os.path.join(d, name + ".json")
        with open(path, "w") as f:
            f.write(data if isinstance(data, str) else json.dumps(data))
        paths.append(path)
    return subprocess.run([sys.executable, SCRIPT, *paths, *flags], capture_output=True,
                          text=True)


checks = []
outputs = []
with tempfile.TemporaryDirectory() as d:
    ref = generation([5, 9, 7, 3], [-0.5, -1.25, -2.0, -0.75], [1.0, 0.01, 1.0, 1.0])

    same = run(d, ref, generation([5, 9, 7, 3], [-0.5005, -1.2501, -2.001, -0.75],
                                  [1.0, 0.01, 1.0, 1.0]))
    outputs.append(same.stdout + same.stderr)
    checks += [
        (same.returncode == 0, "rounding-level differences pass"),
        ("4 of 4 agree" in same.stdout, "the agreeing tokens counted"),
        ("0.001 at token 2" in same.stdout, "the largest difference and where"),
        (same.stdout.rstrip().endswith("ok"), "ok printed"),
    ]

    far = run(d, ref, generation([5, 9, 7, 3], [-0.5, -1.25, -2.01, -0.75], [1] * 4))
    outputs.append(far.stdout)
    checks += [
        (far.returncode == 1, "a log-probability beyond the tolerance fails"),
        ("FAIL: a log-probability differs by 0.01 > 0.004" in far.stdout, "the failure says why"),
    ]
    loose = run(d, ref, generation([5, 9, 7, 3], [-0.5, -1.25, -2.01, -0.75], [1] * 4),
                "--logprob_tol", "0.02")
    checks.append((loose.returncode == 0, "--logprob_tol widens it"))

    # Token 1's two best were 0.01 apart in the reference: rounding may pick the other.
    tie = run(d, ref, generation([5, 10, 2], [-0.5, -1.26, -0.1], [1.0, 0.01, 1.0]))
    outputs.append(tie.stdout)
    checks += [
        (tie.returncode == 0, "a difference at a near tie passes"),
        ("1 of 4 agree (the other has 3)" in tie.stdout, "agreement up to the difference"),
        ("first difference at token 1: 9 against 10" in tie.stdout, "the difference shown"),
    ]
    # Token 2's two best were 1.0 apart: a real disagreement.
    clear = run(d, ref, generation([5, 9, 8, 3], [-0.5, -1.25, -2.0, -0.75], [1] * 4))
    outputs.append(clear.stdout)
    checks += [
        (clear.returncode == 1, "a difference at a clear choice fails"),
        ("not a near tie" in clear.stdout, "the failure says it was not a near tie"),
    ]
    narrow = run(d, ref, generation([5, 10, 2], [-0.5, -1.26, -0.1], [1] * 3), "--tie_tol", "0.005")
    checks.append((narrow.returncode == 1, "--tie_tol narrows what counts as a near tie"))

    short = run(d, ref, generation([5, 9], [-0.5, -1.25], [1, 1]))
    outputs.append(short.stdout)
    checks += [
        (short.returncode == 1, "one generation stopping early fails"),
        ("stopped early (4 against 2 tokens)" in short.stdout, "the early stop said"),
    ]
    nan = run(d, ref, '{"tokens": [5, 9, 7, 3], "logprobs": [-0.5, NaN, -2.0, -0.75], '
              '"top_logprobs": [[], [], [], []]}')
    outputs.append(nan.stdout)
    checks.append((nan.returncode == 1 and "differs by nan" in nan.stdout,
                   "a NaN log-probability fails"))

    bad = [
        ("missing", subprocess.run([sys.executable, SCRIPT, os.path.join(d, "none.json"),
                                    os.path.join(d, "none.json")], capture_output=True, text=True),
         "No such file"),
        ("no logprobs", run(d, ref, {"tokens": [5, 9, 7, 3]}), "no log-probabilities"),
        ("failed", run(d, {"error": "UNAVAILABLE: no trio"}, ref), "the generation failed"),
        ("lengths", run(d, ref, {"tokens": [5], "logprobs": [], "top_logprobs": []}),
         "1 tokens but 0 log-probabilities"),
        ("not json", run(d, ref, "tokens: 5"), "b.json"),
        ("a list", run(d, ref, "[1, 2]"), "a JSON list"),
        ("bad flag", run(d, ref, ref, "--tie_tol", "-1"), "must be at least 0"),
    ]
    for name, result, says in bad:
        outputs.append(result.stderr)
        checks.append((result.returncode == 2 and says in result.stderr,
                       f"bad input ({name}) exits 2 saying '{says}'"))

finish(checks, *outputs)
