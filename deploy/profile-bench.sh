#!/usr/bin/env bash
# Where a bench point's step time goes: per policy, one trio on synthetic weights, one
# `wscope bench` point, then `wscope profile` of its last steps: OUT/profile-POLICY.json (the
# Chrome trace of the three processes) and the per-phase summary on stdout, then the trace
# per layer (deploy/profile_layers.py: each path's attention, which ended later and by how
# much, the waits per step).
#
#   deploy/profile-bench.sh [--arch qwen3_moe] [--layers 4] [--batch 32] [--context 32768]
#       [--policies "writescope cpu-all"] [--steps 4] [--out DIR] [--bin DIR] [--device cuda|host]
#       [--grid-first BATCHES:CONTEXTS] [--one-trio] [--point-warmup 8] [--point-steps 8]
#       [--dry-run]
#
# --one-trio: one trio for all the policies, each point run under its policy (wscope bench
# --policies, the Bench RPC's policy) and profiled in turn, so that a policy may be listed
# more than once (writescope static:0.5 writescope ...) and the policies share the processes,
# their memory and calibrations: trios of one build differ by more than a few per cent. The
# traces are then profile-N-POLICY.json, N counting from 1; --grid-first runs once, first,
# under the first policy.
#
# --grid-first (e.g. 4,16:8192,32768): the trio first runs those points as bench-grid.sh does
# (16 warm-up + 16 measured steps each), so that the profiled point comes after the same
# history as in a grid's trio; the trio's batch limit and KV regions are sized for the
# largest of them and the profiled point. --point-warmup and --point-steps: the profiled
# point's warm-up and measured decode steps (8 and 8; --steps of them are traced: more
# steps, with the trace's --steps, for a point whose steps spread). --dry-run prints the
# trio's sizes and the commands.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH=qwen3_moe LAYERS=4 BATCH=32 CONTEXT=32768 POLICIES="writescope cpu-all" STEPS=4
OUT_DIR="${OUT:-.}" BIN="${WS_BIN:-$ROOT/build/bin}" DEVICE=cuda GRID_FIRST="" DRY=0 ONE_TRIO=0
POINT_WARMUP=8 POINT_STEPS=8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --context) CONTEXT="$2"; shift 2 ;;
    --policies) POLICIES="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --grid-first) GRID_FIRST="$2"; shift 2 ;;
    --one-trio) ONE_TRIO=1; shift ;;
    --point-warmup) POINT_WARMUP="$2"; shift 2 ;;
    --point-steps) POINT_STEPS="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "profile-bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ $POINT_WARMUP =~ ^[0-9]+$ && $POINT_STEPS =~ ^[1-9][0-9]*$ ]]; then
  echo "profile-bench.sh: --point-warmup takes a number of steps (0: none) and --point-steps a" \
    "positive one, not '$POINT_WARMUP' and '$POINT_STEPS'" >&2
  exit 2
fi
list='[1-9][0-9]*(,[1-9][0-9]*)*'
if [[ -n $GRID_FIRST && ! $GRID_FIRST =~ ^$list:$list$ ]]; then
  echo "profile-bench.sh: --grid-first must be BATCHES:CONTEXTS (e.g. 4,16:8192,32768), not" \
    "'$GRID_FIRST'" >&2
  exit 2
fi
# shellcheck source=deploy/bench-trio.sh
source "$ROOT/deploy/bench-trio.sh"
kv_bytes=$(kv_bytes_of "$ARCH")
# The trio serves the grid's points first: its batch limit and regions take the largest
# (a grid point of 32 sequences in a trio sized for the profiled 4 was refused, run 158).
max_batch=$(max_of "$BATCH${GRID_FIRST:+,${GRID_FIRST%%:*}}")
max_context=$(max_of "$CONTEXT${GRID_FIRST:+,${GRID_FIRST#*:}}")
region_mib=$(((max_batch * (max_context + 1024) * kv_bytes * LAYERS >> 20) * 11 / 10 + 64))
if ((DRY)); then
  echo "profile-bench: trio of $max_batch sequences at most, regions ${region_mib} MiB each"
  start_trio() { echo "start_trio $*"; }
  stop_trio() { echo "stop_trio"; }
  trap - EXIT INT TERM
  WS_TARGET=TARGET BIN=BIN
fi
run() { if ((DRY)); then echo "$*"; else "$@"; fi; }
((DRY)) || mkdir -p "$OUT_DIR"
# profile_point POLICY TRACE [BENCH_FLAG...]: the point under POLICY, then its trace.
profile_point() {
  local policy="$1" trace="$2"
  shift 2
  echo "== $policy, batch $BATCH x $CONTEXT"
  run "$BIN/wscope" bench --target="$WS_TARGET" --batches="$BATCH" --contexts="$CONTEXT" \
    --decode_steps="$POINT_STEPS" --warmup_steps="$POINT_WARMUP" "$@" || true
  # An earlier run's trace at that path would be read as this one's where the profile fails.
  ((DRY)) || rm -f "$trace"
  run "$BIN/wscope" profile --target="$WS_TARGET" --steps="$STEPS" --out="$trace" ||
    echo "profile-bench: wscope profile failed under $policy: no trace" >&2
  if [[ -f $trace ]]; then python3 "$ROOT/deploy/profile_layers.py" "$trace" || true; fi
}
grid_first() {
  echo "== $1, the grid's points first: batches ${GRID_FIRST%%:*}, contexts ${GRID_FIRST#*:}"
  run "$BIN/wscope" bench --target="$WS_TARGET" --batches="${GRID_FIRST%%:*}" \
    --contexts="${GRID_FIRST#*:}" --decode_steps=16 --warmup_steps=16 || true
}
if ((ONE_TRIO)); then
  read -r first_policy _ <<<"$POLICIES"
  start_trio profile-bench "$first_policy" "$region_mib" --max_sequences="$max_batch"
  [[ -n $GRID_FIRST ]] && grid_first "$first_policy"
  n=0
  for policy in $POLICIES; do
    n=$((n + 1))
    profile_point "$policy" "$OUT_DIR/profile-$n-${policy//[^a-z0-9.-]/_}.json" \
      --policies="$policy"
  done
  stop_trio
  exit 0
fi
for policy in $POLICIES; do
  start_trio profile-bench "$policy" "$region_mib" --max_sequences="$max_batch"
  [[ -n $GRID_FIRST ]] && grid_first "$policy"
  profile_point "$policy" "$OUT_DIR/profile-${policy//[^a-z0-9.-]/_}.json"
  stop_trio
done
