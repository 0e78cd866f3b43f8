#!/usr/bin/env bash
# Issue 7's decode grid on one model shape: for each policy, one trio on synthetic weights of
# the real shape (fewer layers: the per-layer step time and the projection are what count),
# then `wscope bench` over batches x contexts (the KV placed by the policy's steering, not
# computed: attention's speed does not depend on KV values; the routed experts' does depend
# on the tokens, so each row starts from its own token, see Engine::SubmitBench). Appends to
# OUT/bench-ARCH.csv (a row per point), OUT/steps-ARCH.csv (every measured step: the shares,
# the read choice, its two predictions and the rests, the scheduler's lines after it) and
# OUT/warmup-ARCH.csv (the warm-up steps, alike) and prints the table as it goes.
#
#   deploy/bench-grid.sh --arch qwen3_moe|mixtral|deepseek_v2 [--layers 4]
#       [--policies "writescope transfer-all cpu-all static:0.5 monolithic"]
#       [--batches 4,16,32] [--contexts 2048,8192,16384,32768] [--steps 16] [--warmup 16]
#       [--repeats 1] [--one-runtime [--turns N] [--turn-warmup N] [--time-limit S]]
#       [--prewarm N] [--hot-experts auto|on|off] [--out DIR]
#       [--bin DIR] [--device cuda|host] [--sampling SPEC] [-- EXTRA_COORDINATOR_FLAGS...]
#
# Exit status: 2 for a bad flag (before any trio starts); 1 where a `wscope bench` call failed
# (a point refused, a trio that died: the other calls still run, and the CSVs keep what was
# measured); else 0.
#
# --sampling (default greedy): how the decoded tokens are sampled, e.g.
# temperature=0.7,top_p=0.9 (keys temperature, top_k, top_p, seed, logprobs: wscope bench's
# flags of those names); the CSV's sampling column says which.
#
# --hot-experts: the gpu_worker's resident hot experts (auto: on with CUDA), sized as the
# full model's share per MoE layer (bench-trio.sh); every policy gets the same.
#
# --repeats N runs the policies round-robin N times, a fresh trio each time: trios of one
# build on one machine differ (their CPU experts by up to 2.3x on the H200 microVM), so
# repeats interleaved in time separate the policies from the trios; bench_report.py averages
# a point's rows.
# --one-runtime: one trio for all the policies instead of one per policy and repeat: each
# point runs under every policy in turn (wscope bench --policies, the Bench RPC's policy;
# each policy keeps its own scheduler across its points, all share the processes, their
# memory, the hot experts and the start-up calibrations of the two paths), the order reversed
# in every second repeat (--rounds). A slow phase of the host then falls on the policies of
# the points it spans, not on one policy's whole trio, and no trio start-ups are paid.
# --turns N (with --one-runtime; default 1): at each point of a round the policies take N
# turns in a row, each --steps measured steps on the context placed anew, the order reversed
# every second turn and every second round (wscope bench --turns; the CSVs' turn column);
# the turns after a point's first warm up --turn-warmup steps (default --warmup: the
# scheduler learned the point in its first turn). Shorter turns bring the policies' steps
# closer in time: the host's CPU expert time moved 10-30 % between the policies' turns of
# 16 + 24 steps with the same work (runs 231-232), more than the gaps between the policies at
# 8K. best_baseline_report.py pairs the policies per turn.
# --time-limit S (with --one-runtime): end within S seconds of this script's start: the bench
# gets what is left of them when it starts, less 10 s to stop the trio, as wscope bench
# --bench_for (no point starts after it, nor one whose rounds would not end by then, so
# every policy keeps as many rounds of each point). gpu-grids.sh passes its grid's
# time; its timeout, which stops the grid wherever it is, stays behind it.
# --prewarm N (with --one-runtime; default warm-up + measured steps, 0: none): the trio's
# first N decode steps, at the first point under static:0.5, recorded nowhere (wscope bench
# --prewarm_steps): a runtime's first steps pay one-time costs, which fell into the first
# policy's first point (run 157: writescope's first round of the full DeepSeek-V2-Lite at
# 32 x 32K stepped 465 ms after 16 warm-up steps, its second 394).
# --warmup: the measured round's KV is placed at the optimum of the scheduler's estimates
# at that moment (Scheduler::PlacementShare), so the warm-up round must let them learn the
# point: their EMA follows the steps with a time constant of ~20 (EstimatorOptions).
# 6 steps were too few (DeepSeek 32 x 32K: placed 0.31-0.34 after 6 in runs 59 and 64,
# 77-83 ms per step; 0.37-0.40 after 16 in run 65, 69-74 ms; 0.37 after 8 in run 63).
# Host KV regions are sized so that either one can hold the largest point whole (the single-
# path policies put everything in one region); the GPU KV budget is the coordinator's default
# (2 GiB, 0.3 GiB for MLA), the VRAM budget 32 GiB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH="" LAYERS=4 POLICIES="writescope transfer-all cpu-all static:0.5 monolithic" REPEATS=1
BATCHES="4,16,32" CONTEXTS="2048,8192,16384,32768" STEPS=16 WARMUP=16 OUT_DIR="${OUT:-.}"
BIN="${WS_BIN:-$ROOT/build/bin}" DEVICE=cuda EXTRA=() ONE_RUNTIME=0 PREWARM="" SAMPLING=""
TURNS=1 TURN_WARMUP="" TIME_LIMIT="" STARTED=$SECONDS
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --policies) POLICIES="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --contexts) CONTEXTS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --one-runtime) ONE_RUNTIME=1; shift ;;
    --prewarm) PREWARM="$2"; shift 2 ;;
    --turns) TURNS="$2"; shift 2 ;;
    --turn-warmup) TURN_WARMUP="$2"; shift 2 ;;
    --time-limit) TIME_LIMIT="$2"; shift 2 ;;
    --hot-experts) HOT_EXPERTS="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --sampling) SAMPLING="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "bench-grid.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
fail() { echo "bench-grid.sh: $*" >&2; exit 2; }
# Every flag checked before a trio starts (check_grid: --layers, --batches, --contexts,
# --policies as gpu-grids.sh checks them).
# shellcheck source=deploy/device-grids-lib.sh
source "$ROOT/deploy/device-grids-lib.sh"
positive='^[1-9][0-9]*$' count='^(0|[1-9][0-9]*)$'
case "$ARCH" in qwen3_moe|mixtral|deepseek_v2) ;;
  *) fail "--arch must be qwen3_moe, mixtral or deepseek_v2, not '$ARCH'" ;; esac
check_grid "$LAYERS" "$BATCHES" "$CONTEXTS" "$POLICIES"
[[ $STEPS =~ $positive ]] || fail "--steps must be a positive number of steps, not '$STEPS'"
[[ $WARMUP =~ $count ]] || fail "--warmup must be a number of steps (0: none), not '$WARMUP'"
[[ $REPEATS =~ $positive ]] || fail "--repeats must be a positive integer, not '$REPEATS'"
[[ -z $PREWARM || $PREWARM =~ $count ]] ||
  fail "--prewarm must be a number of steps (0: none), not '$PREWARM'"
PREWARM=${PREWARM:-$((WARMUP + STEPS))}
[[ $TURNS =~ $positive ]] || fail "--turns must be a positive integer, not '$TURNS'"
[[ -z $TURN_WARMUP || $TURN_WARMUP =~ $count ]] ||
  fail "--turn-warmup must be a number of steps (0: none), not '$TURN_WARMUP'"
if ((!ONE_RUNTIME)) && { ((TURNS > 1)) || [[ -n $TURN_WARMUP ]]; }; then
  fail "--turns and --turn-warmup alternate the policies within one runtime: give --one-runtime"
fi
TURN_WARMUP=${TURN_WARMUP:-$WARMUP}
if [[ -n $TIME_LIMIT ]] && { ! [[ $TIME_LIMIT =~ $positive ]] || ((!ONE_RUNTIME)); }; then
  fail "--time-limit takes a positive number of seconds, with --one-runtime, not '$TIME_LIMIT'"
fi
# --sampling's keys as wscope bench's flags.
SAMPLING_FLAGS=()
if [[ -n $SAMPLING ]]; then
  IFS=',' read -r -a sampling_parts <<<"$SAMPLING"
  for part in "${sampling_parts[@]}"; do
    [[ $part =~ ^(temperature|top_k|top_p|seed|logprobs)=[0-9]+(\.[0-9]+)?$ ]] ||
      fail "--sampling takes KEY=NUMBER,... with the keys temperature, top_k, top_p, seed and" \
        "logprobs, not '$part'"
    SAMPLING_FLAGS+=("--$part")
  done
fi
# shellcheck source=deploy/bench-trio.sh
source "$ROOT/deploy/bench-trio.sh"
kv_bytes=$(kv_bytes_of "$ARCH")
max_batch=$(max_of "$BATCHES") max_context=$(max_of "$CONTEXTS")
# Tokens per sequence: the context, the decode steps (or the prewarm's, at the first point),
# the D-window's flushes (one block).
longest_warmup=$((TURN_WARMUP > WARMUP ? TURN_WARMUP : WARMUP))
steps_per_point=$((STEPS + longest_warmup > PREWARM ? STEPS + longest_warmup : PREWARM))
tokens=$((max_batch * (max_context + steps_per_point + 512)))
region_mib=$(((tokens * kv_bytes * LAYERS >> 20) * 11 / 10 + 64))
mkdir -p "$OUT_DIR"
csv="$OUT_DIR/bench-$ARCH.csv"
# A bench that fails (a point refused, a trio that died) leaves the others to run and its
# rows to the CSVs; the script then ends with exit status 1, so that a caller sees it.
failed=0
finish() {
  echo "bench-grid: $csv"
  if ((failed)); then
    echo "bench-grid.sh: $failed wscope bench call(s) failed (their logs above): the CSVs" \
      "hold what they measured" >&2
    exit 1
  fi
  exit 0
}
echo "bench-grid: $ARCH, $LAYERS layers, regions ${region_mib} MiB each, hot experts" \
  "$HOT_EXPERTS, policies: $POLICIES"
if ((ONE_RUNTIME)); then
  echo "bench-grid: one runtime for all policies, $REPEATS round(s), $TURNS turn(s) a point"
  start_trio bench-grid "${POLICIES%% *}" "$region_mib" --max_sequences="$max_batch" \
    ${EXTRA[@]+"${EXTRA[@]}"}
  BENCH_FOR=()
  if [[ -n $TIME_LIMIT ]]; then
    left=$((TIME_LIMIT - (SECONDS - STARTED) - 10))
    ((left > 0)) || left=1
    echo "bench-grid: the bench ends within ${left} s (--time-limit $TIME_LIMIT)"
    BENCH_FOR=(--bench_for="${left}s")
  fi
  "$BIN/wscope" bench --target="$WS_TARGET" --batches="$BATCHES" --contexts="$CONTEXTS" \
    --decode_steps="$STEPS" --warmup_steps="$WARMUP" --rounds="$REPEATS" --turns="$TURNS" \
    --turn_warmup_steps="$TURN_WARMUP" --prewarm_steps="$PREWARM" \
    ${BENCH_FOR[@]+"${BENCH_FOR[@]}"} \
    ${SAMPLING_FLAGS[@]+"${SAMPLING_FLAGS[@]}"} \
    --policies="$(tr -s ' ' ',' <<<"$POLICIES" | sed 's/^,//; s/,$//')" --csv="$csv" \
    --steps_csv="$OUT_DIR/steps-$ARCH.csv" --warmup_steps_csv="$OUT_DIR/warmup-$ARCH.csv" ||
    failed=1
  stop_trio
  finish
fi
for repeat in $(seq "$REPEATS"); do
  # Even repeats take the policies in reverse order, so that a drift of the machine over
  # the run weighs on every policy alike once averaged (the trios' CPU experts differ:
  # Mixtral 32 x 8K took 52-69 ms per step for the same work in run 65).
  order="$POLICIES"
  if ((repeat % 2 == 0)); then order=$(tr ' ' '\n' <<<"$POLICIES" | tac | tr '\n' ' '); fi
  if [[ $REPEATS -gt 1 ]]; then echo "bench-grid: repeat $repeat of $REPEATS: $order"; fi
  for policy in $order; do
    start_trio bench-grid "$policy" "$region_mib" --max_sequences="$max_batch" ${EXTRA[@]+"${EXTRA[@]}"}
    "$BIN/wscope" bench --target="$WS_TARGET" --batches="$BATCHES" --contexts="$CONTEXTS" \
      --decode_steps="$STEPS" --warmup_steps="$WARMUP" --csv="$csv" \
      ${SAMPLING_FLAGS[@]+"${SAMPLING_FLAGS[@]}"} --steps_csv="$OUT_DIR/steps-$ARCH.csv" \
      --warmup_steps_csv="$OUT_DIR/warmup-$ARCH.csv" ||
      failed=$((failed + 1))
    stop_trio
  done
done
finish
