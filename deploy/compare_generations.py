#!/usr/bin/env python3
"""Compares two greedy generations of one prompt (`wscope generate --json --logprobs=N`, N >= 2)
that should agree to rounding: the same trio under two kernels, say.

   python3 deploy/compare_generations.py REFERENCE.json OTHER.json [--logprob_tol 4e-3]
       [--tie_tol 0.02]

While the tokens agree, each chosen token's log-probability may differ by at most
--logprob_tol. Where the tokens first differ, the reference's two best candidates must have
been within --tie_tol of each other (a near tie that rounding may flip); after that the two
sequences are different texts and nothing more is compared. Prints one line each: the tokens
that agree, the largest log-probability difference and where, the divergence (if any), then
"ok" or "FAIL: ...". Exit status 0 when they agree, 1 when they do not, 2 for bad input.
"""
import argparse
import json
import math
import sys


class BadInput(Exception):
    pass


def load(path):
    """The generation's tokens, chosen log-probabilities and top alternatives (BadInput if the
    file is not such a generation)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: {e}")
    if not isinstance(data, dict):
        raise BadInput(f"{path}: not a generation (a JSON {type(data).__name__})")
    if "error" in data:
        raise BadInput(f"{path}: the generation failed: {data['error']}")
    tokens, logprobs, top = data.get("tokens"), data.get("logprobs"), data.get("top_logprobs")
    if tokens is None or logprobs is None or top is None:
        raise BadInput(f"{path}: no log-probabilities (generate with --json --logprobs=2)")
    if not (len(tokens) == len(logprobs) == len(top)):
        raise BadInput(f"{path}: {len(tokens)} tokens but {len(logprobs)} log-probabilities "
                       f"and {len(top)} lists of alternatives")
    return tokens, logprobs, top


def top2_gap(alternatives):
    """The log-probability gap between the two best alternatives (inf with fewer than two)."""
    values = sorted((lp for _, lp in alternatives), reverse=True)
    return values[0] - values[1] if len(values) >= 2 else math.inf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("other")
    parser.add_argument("--logprob_tol", type=float, default=4e-3)
    parser.add_argument("--tie_tol", type=float, default=0.02)
    args = parser.parse_args()
    if not (args.logprob_tol >= 0 and args.tie_tol >= 0):
        parser.error("--logprob_tol and --tie_tol must be at least 0")
    try:
        ref_tokens, ref_lp, ref_top = load(args.reference)
        tokens, lp, _ = load(args.other)
    except BadInput as e:
        print(f"compare_generations: {e}", file=sys.stderr)
        sys.exit(2)

    failures = []
    agree = 0
    worst, worst_at = 0.0, None
    for i in range(min(len(ref_tokens), len(tokens))):
        if ref_tokens[i] != tokens[i]:
            break
        agree += 1
        diff = abs(ref_lp[i] - lp[i])
        # NaN counts as the worst, and stays so.
        if worst_at is None or math.isnan(diff) or (not math.isnan(worst) and diff > worst):
            worst, worst_at = diff, i
    print(f"tokens: {agree} of {len(ref_tokens)} agree (the other has {len(tokens)})")
    if worst_at is not None:
        print(f"largest log-probability difference: {worst:.3g} at token {worst_at} "
              f"({ref_lp[worst_at]:.6g} against {lp[worst_at]:.6g})")
        if not worst <= args.logprob_tol:
            failures.append(f"a log-probability differs by {worst:.3g} > {args.logprob_tol:g}")
    if agree < min(len(ref_tokens), len(tokens)):
        gap = top2_gap(ref_top[agree])
        print(f"first difference at token {agree}: {ref_tokens[agree]} against {tokens[agree]}; "
              f"the reference's two best were {gap:.3g} apart")
        if not gap <= args.tie_tol:
            failures.append(f"they differ at token {agree} where the reference's two best were "
                            f"{gap:.3g} > {args.tie_tol:g} apart (not a near tie)")
    elif len(ref_tokens) != len(tokens):
        failures.append(f"one stopped early ({len(ref_tokens)} against {len(tokens)} tokens)")
    if failures:
        print("FAIL: " + "; ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
