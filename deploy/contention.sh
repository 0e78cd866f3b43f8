#!/usr/bin/env bash
# Issue 7's contention experiment: per policy, one trio; `wscope bench` repeats one point
# (batch x context) in rounds (each round places its context anew, at the scheduler's target
# of that moment: how a changed r reaches the KV without moving any) and records every
# measured step with its time; after --before seconds a competing CPU + DRAM load
# (ws_cpu_load, --load-threads threads) runs for --during seconds. Writes
# OUT/contention-steps.csv (one row per measured step), OUT/contention-warmup.csv (one per
# warm-up step: its decisions, explorations among them, are not in the first) and
# OUT/contention-events.csv (load start/end). --cycles N runs the load N times, each for
# --during seconds followed by --after seconds without it (more returns after a load per
# trio: deploy/contention_report.py reports each). A bench that ends before a load (a point
# it refused, e.g. a context the model cannot hold) stops the run there with its reason,
# exit 1, instead of loading a CPU that nothing measures. A bad flag, or an --out that already
# holds the CSVs (an earlier run's: the bench would append to them), exits 2 before any trio
# starts.
#
#   deploy/contention.sh [--arch qwen3_moe] [--layers 4] [--batch 16] [--context 32768]
#       [--policies "writescope static:0.5 transfer-all"] [--load-threads 8]
#       [--before 20] [--during 40] [--after 0] [--cycles 1] [--out DIR] [--bin DIR]
#       [--device cuda|host]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH=qwen3_moe LAYERS=4 BATCH=16 CONTEXT=32768 POLICIES="writescope static:0.5 transfer-all"
LOAD_THREADS=8 BEFORE=20 DURING=40 AFTER=0 CYCLES=1 OUT_DIR="${OUT:-.}" BIN="${WS_BIN:-$ROOT/build/bin}"
DEVICE=cuda
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --context) CONTEXT="$2"; shift 2 ;;
    --policies) POLICIES="$2"; shift 2 ;;
    --load-threads) LOAD_THREADS="$2"; shift 2 ;;
    --before) BEFORE="$2"; shift 2 ;;
    --during) DURING="$2"; shift 2 ;;
    --after) AFTER="$2"; shift 2 ;;
    --cycles) CYCLES="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "contention.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
fail() { echo "contention.sh: $*" >&2; exit 2; }
# Every flag checked before a trio starts.
# shellcheck source=deploy/device-grids-lib.sh
source "$ROOT/deploy/device-grids-lib.sh"
positive='^[1-9][0-9]*$' count='^(0|[1-9][0-9]*)$'
for flag in layers:$LAYERS batch:$BATCH context:$CONTEXT load-threads:$LOAD_THREADS \
  during:$DURING cycles:$CYCLES; do
  [[ ${flag#*:} =~ $positive ]] || fail "--${flag%%:*} must be a positive integer, not '${flag#*:}'"
done
for flag in before:$BEFORE after:$AFTER; do
  [[ ${flag#*:} =~ $count ]] || fail "--${flag%%:*} must be a number of seconds, not '${flag#*:}'"
done
check_policies "$POLICIES"
# shellcheck source=deploy/bench-trio.sh
source "$ROOT/deploy/bench-trio.sh"
kv_bytes=$(kv_bytes_of "$ARCH")
[[ -x $BIN/ws_cpu_load ]] || fail "$BIN/ws_cpu_load not found"
# Rounds overlap in the placement only while one ends and the next starts: room for two.
region_mib=$(((2 * BATCH * (CONTEXT + 1024) * kv_bytes * LAYERS >> 20) + 64))
steps_csv="$OUT_DIR/contention-steps.csv" events="$OUT_DIR/contention-events.csv"
# Each round's warm-up steps too (decisions and explorations run through them).
warmup_csv="$OUT_DIR/contention-warmup.csv"
# The bench appends to its CSVs and the events were appended to: an earlier run's rows would
# join this one's (the report would read them as more rounds of each policy).
for csv in "$steps_csv" "$warmup_csv" "$events"; do
  [[ ! -e $csv ]] || fail "--out '$OUT_DIR' already holds $(basename "$csv") (an earlier" \
    "run's?): give a new folder"
done
mkdir -p "$OUT_DIR"
echo "policy,unix_s,event" >"$events"
now() { date +%s.%N; }
# bench_alive POLICY: whether the bench still runs; where it ended early (a point it refused,
# e.g. a context the model cannot hold), says why, stops the trio and exits 1 before any
# (further) load: a load without measured steps is no experiment.
bench_alive() {
  kill -0 "$bench" 2>/dev/null && return 0
  local rc=0
  wait "$bench" || rc=$?
  echo "contention.sh: the bench under $1 ended (exit $rc) before the load; its log" \
    "($OUT_DIR/contention-$1.log) ends:" >&2
  tail -n 3 "$OUT_DIR/contention-$1.log" >&2
  stop_trio
  exit 1
}
# pause SECONDS POLICY: sleeps SECONDS in 1-s steps, and stops at once where the bench ended
# (bench_alive).
pause() {
  local i
  for ((i = 0; i < $1; ++i)); do
    bench_alive "$2"
    sleep 1
  done
}
for policy in $POLICIES; do
  start_trio contention "$policy" "$region_mib" --max_sequences="$((2 * BATCH))"
  total=$((BEFORE + CYCLES * (DURING + AFTER)))
  echo "contention: $policy, batch $BATCH x $CONTEXT, load of $LOAD_THREADS threads from" \
    "${BEFORE}s for ${DURING}s, $CYCLES time(s) ${AFTER}s apart"
  "$BIN/wscope" bench --target="$WS_TARGET" --batches="$BATCH" --contexts="$CONTEXT" \
    --decode_steps=8 --warmup_steps=2 --rounds=100000 --bench_for="${total}s" \
    --steps_csv="$steps_csv" --warmup_steps_csv="$warmup_csv" \
    >"$OUT_DIR/contention-$policy.log" 2>&1 &
  bench=$!
  pause "$BEFORE" "$policy"
  for ((cycle = 1; cycle <= CYCLES; ++cycle)); do
    ((cycle == 1)) || pause "$AFTER" "$policy"
    bench_alive "$policy"
    echo "$policy,$(now),load start" >>"$events"
    "$BIN/ws_cpu_load" --threads="$LOAD_THREADS" --seconds="$DURING" \
      >>"$OUT_DIR/contention-load.log" 2>&1 || true
    echo "$policy,$(now),load end" >>"$events"
  done
  wait $bench || true
  stop_trio
done
echo "contention: $steps_csv, $events"
