#!/usr/bin/env bash
# Runs ON the GPU machine, from the repository root: issue 7's decode grid for several model
# shapes in one device call, inside one time budget, with each shape's report and the
# pooled geometric means, so that one call's output is complete even when it is cut short.
# The bundle (deploy/gpu-bundle.sh) must be carried; it is unpacked by deploy/gpu-run.sh.
#
#   deploy/gpu-grids.sh --out DIR [--budget-s 570] [--archive FILE] [--dry-run]
#       [--layers 4] [--batches 4,16,32] [--contexts 8192,32768] [--policies "..."]
#       [--one-runtime [--turns N] [--turn-warmup N]] [--no-probe] [--sampling SPEC]
#       SPEC [SPEC...]
#
# SPEC is ARCH:REPEATS:STEPS[:SECONDS]: deepseek_v2, qwen3_moe or mixtral, bench-grid.sh's
# --repeats and --steps (measured steps per point), and at most SECONDS for that grid (by
# default an equal share of what is left of the budget). Every grid runs 4 layers, batch
# 4/16/32 x contexts 8192 and 32768 (Mixtral: a context above 32512 runs at 32512, its
# context is 32K), all five policies, 16 warm-up steps; --layers, --batches, --contexts and
# --policies change that for every grid (the full DeepSeek-V2-Lite at the 1M-token point:
# --layers 27 --batches 32 --contexts 32768 deepseek_v2:2:16; runs 117-119 took 45-60 s per
# policy and point there, the trio's start included). A grid that runs out of its time is
# stopped (timeout) and keeps the points it finished.
#
# DIR must be new or empty (a used one is refused: the grids append to its CSVs). Writes
# into DIR: bench-ARCH.csv, steps-ARCH.csv, warmup-ARCH.csv, grid-ARCH.log,
# report-ARCH.txt (bench_report.py --ceilings ARCH), sweep-ARCH.txt where --policies has two
# static:R or more (share_sweep_report.py), modes-ARCH.txt (modes_report.py:
# writescope's read modes per window, its warm-up's before them), mode-cost-ARCH.txt where
# --policies has writescope and transfer-all (mode_cost_report.py: writescope's steps by mode
# against transfer-all's) and report-pooled.txt (the
# first grid's report with the others' ratios pooled in, --pool-with). --archive FILE: all
# of DIR packed into one .tgz at the end (the device returns at most 8 files of $OUT per
# call: run with --out outside $OUT and --archive $OUT/grids.tgz). Measured times, one
# repeat with all five policies and trio start-ups: DeepSeek x 48 steps ~105 s, Qwen3 x 48
# ~155 s, Mixtral x 16 ~240 s (runs 98-100: 2 repeats took 211, just over 305 and 469-489 s).
# --one-runtime: bench-grid.sh's, one trio per grid for all its policies and repeats (the
# policies interleaved per point; the grid's time goes with it as bench-grid.sh's
# --time-limit, so that the bench ends in time with whole points). --turns N, --turn-warmup
# N: bench-grid.sh's (with --one-runtime: N turns of the policies at each point, STEPS
# measured steps each, the later turns warmed up --turn-warmup steps). --sampling:
# bench-grid.sh's (e.g. temperature=0.7,top_p=0.9; default greedy). --dry-run prints the
# commands instead of running them.
# Before the grids, ws_probe (in the bundle) measures this lease's ceilings into
# DIR/probe.json and probe.log (at most 90 s, out of the budget; with the channel and the
# pageable copies left out it took a few seconds in runs 154-157, at 5 repetitions, whose
# joint host read moved 17 % between two probes of one lease: now the probe's 10), and every
# report prints the bound from them beside the documented ceilings' (bench_report.py
# --probe): leases differ (the split's copies ran at 43 GB/s on one and 53 on another, runs
# 153 and 150). After the grids it probes once more (probe-after.json, probe-after.log; 40 s
# of the budget kept back for it) and each grid's report is written again with both bounds:
# one lease's joint host read was 114.6 GB/s before a grid and 141.9 after it (runs 159 and
# 160, one device call; its DRAM read stream alone 83 and 110 GB/s). --no-probe: no probe.
# Exit status: 2 for a bad argument (before anything runs), 1 where no grid wrote a bench CSV
# (each timed out or failed before its first point: the logs are still packed), else 0 (a
# grid cut short or with failed points keeps what it wrote: its grid-ARCH.log says which).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=deploy/device-grids-lib.sh
source "$ROOT/deploy/device-grids-lib.sh"
OUT_DIR="" BUDGET=570 DRY=0 ARCHIVE="" SPECS=() LAYERS=4 BATCHES=4,16,32 CONTEXTS=8192,32768
POLICIES="writescope transfer-all cpu-all static:0.5 monolithic" ONE_RUNTIME=() PROBE=1 SAMPLING=()
TURNS=()
fail() { echo "gpu-grids.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    --budget-s) BUDGET="$2"; shift 2 ;;
    --archive) ARCHIVE="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --contexts) CONTEXTS="$2"; shift 2 ;;
    --policies) POLICIES="$2"; shift 2 ;;
    --one-runtime) ONE_RUNTIME=(--one-runtime); shift ;;
    --turns)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || fail "--turns takes a positive number, not '${2:-}'"
      TURNS+=("$1" "$2"); shift 2 ;;
    --turn-warmup)
      [[ ${2:-} =~ ^(0|[1-9][0-9]*)$ ]] ||
        fail "--turn-warmup takes a number of steps, not '${2:-}'"
      TURNS+=("$1" "$2"); shift 2 ;;
    --no-probe) PROBE=0; shift ;;
    --sampling) SAMPLING=(--sampling "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    -*) echo "gpu-grids.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) SPECS+=("$1"); shift ;;
  esac
done
[[ -n $OUT_DIR ]] || fail "--out DIR is required"
((${#TURNS[@]} == 0 || ${#ONE_RUNTIME[@]} > 0)) ||
  fail "--turns and --turn-warmup alternate the policies within one runtime:" \
    "give --one-runtime"
[[ $BUDGET =~ ^[1-9][0-9]*$ ]] || fail "--budget-s must be a positive number of seconds, not '$BUDGET'"
((${#SPECS[@]} > 0)) || fail "no grid to run: give at least one ARCH:REPEATS:STEPS"
check_grid "$LAYERS" "$BATCHES" "$CONTEXTS" "$POLICIES"
key_value='(temperature|top_k|top_p|seed|logprobs)=[0-9]+(\.[0-9]+)?'
if ((${#SAMPLING[@]})) && ! [[ ${SAMPLING[1]} =~ ^$key_value(,$key_value)*$ ]]; then
  fail "--sampling takes KEY=NUMBER,... with the keys temperature, top_k, top_p, seed and" \
    "logprobs, not '${SAMPLING[1]}'"
fi
check_out_and_archive
for spec in "${SPECS[@]}"; do
  IFS=: read -r arch repeats steps seconds extra <<<"$spec"
  case "$arch" in deepseek_v2|qwen3_moe|mixtral) ;; *) fail "'$spec': unknown arch '$arch'" ;; esac
  [[ $repeats =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ && -z ${extra:-} ]] ||
    fail "'$spec': expected ARCH:REPEATS:STEPS[:SECONDS] with positive numbers"
  [[ -z ${seconds:-} || $seconds =~ ^[1-9][0-9]*$ ]] || fail "'$spec': bad SECONDS '$seconds'"
done

unpack_bundle
start=$(date +%s)
# probe_lease NAME SECONDS: ws_probe into DIR/NAME.json and NAME.log; on success its file
# joins the reports' --probe list.
probe=()
probe_lease() {
  echo "gpu-grids: probing this lease's ceilings into $1.json (ws_probe, at most $2 s)"
  run_into "$OUT_DIR/$1.log" timeout "$2" "${WS_BIN:-/tmp/ws/bin}/ws_probe" \
    --json="$OUT_DIR/$1.json" --channel=false --pageable_mib=256 ||
    echo "gpu-grids: the probe failed ($1.log); the reports leave it out" >&2
  if ((DRY)) || [[ -s $OUT_DIR/$1.json ]]; then
    probe+=(--probe "$OUT_DIR/$1.json")
    ((DRY)) || grep -E "H2D pinned|DRAM, OpenMP triad|both at once" "$OUT_DIR/$1.log" || true
  fi
}
# Kept back from the grids: the reports and the copy home, and the probe after them.
reserve=$((20 + (PROBE ? 40 : 0)))
((PROBE)) && probe_lease probe 90
# report ARCH: the grid's report with the probes taken so far.
report() {
  run_into "$OUT_DIR/report-$1.txt" python3 "$ROOT/deploy/bench_report.py" \
    "$OUT_DIR/bench-$1.csv" --ceilings "$1" ${probe[@]+"${probe[@]}"} || true
}
# A sweep of static shares (two or more static:R policies): the adaptive policy's share and step
# against it (share_sweep_report.py) into sweep-ARCH.txt.
statics=0
for policy in $POLICIES; do [[ $policy == static:* ]] && statics=$((statics + 1)); done
left_specs=${#SPECS[@]}
archs=()
for spec in "${SPECS[@]}"; do
  IFS=: read -r arch repeats steps seconds <<<"$spec"
  # A dry run spends no budget: its shares do not depend on how long printing took.
  elapsed=0
  ((DRY)) || elapsed=$(($(date +%s) - start))
  left=$((BUDGET - elapsed - reserve))
  share=$((left / left_specs))
  limit=${seconds:-$share}
  ((limit <= left)) || limit=$left
  left_specs=$((left_specs - 1))
  if ((limit < 30)); then
    echo "gpu-grids: $arch skipped: ${left} s left of the budget" >&2
    continue
  fi
  contexts=$(arch_contexts "$arch" "$CONTEXTS")
  echo "gpu-grids: $arch, $repeats repeat(s) x $steps steps, at most $limit s"
  t0=$(date +%s)
  rc=0
  # With one runtime the bench itself ends within the grid's time, whole points only
  # (bench-grid.sh --time-limit); the timeout stops whatever overruns it.
  time_limit=()
  ((${#ONE_RUNTIME[@]})) && time_limit=(--time-limit "$limit")
  run_into "$OUT_DIR/grid-$arch.log" timeout "$limit" "$ROOT/deploy/bench-grid.sh" --arch "$arch" \
    --layers "$LAYERS" --batches "$BATCHES" --contexts "$contexts" --policies "$POLICIES" \
    --warmup 16 --steps "$steps" --repeats "$repeats" ${ONE_RUNTIME[@]+"${ONE_RUNTIME[@]}"} \
    ${TURNS[@]+"${TURNS[@]}"} ${time_limit[@]+"${time_limit[@]}"} \
    ${SAMPLING[@]+"${SAMPLING[@]}"} --out "$OUT_DIR" || rc=$?
  echo "gpu-grids: $arch ended (exit $rc) after $(($(date +%s) - t0)) s"
  settle_trios gpu-grids
  if ((DRY)) || [[ -s $OUT_DIR/bench-$arch.csv ]]; then
    archs+=("$arch")
    report "$arch"
    if ((statics >= 2)); then
      run_into "$OUT_DIR/sweep-$arch.txt" python3 "$ROOT/deploy/share_sweep_report.py" \
        "$OUT_DIR/bench-$arch.csv" || true
    fi
    if ((DRY)) || [[ -s $OUT_DIR/steps-$arch.csv ]]; then
      warmup=()
      [[ -s $OUT_DIR/warmup-$arch.csv ]] && warmup=(--warmup "$OUT_DIR/warmup-$arch.csv")
      run_into "$OUT_DIR/modes-$arch.txt" python3 "$ROOT/deploy/modes_report.py" \
        "$OUT_DIR/steps-$arch.csv" ${warmup[@]+"${warmup[@]}"} || true
      if [[ " $POLICIES " == *" writescope "* && " $POLICIES " == *" transfer-all "* ]]; then
        run_into "$OUT_DIR/mode-cost-$arch.txt" python3 "$ROOT/deploy/mode_cost_report.py" \
          "$OUT_DIR/steps-$arch.csv" || true
      fi
    fi
  fi
done
# The lease once more after its grids, and their reports again with both bounds.
if ((PROBE && ${#archs[@]} > 0)); then
  probed=${#probe[@]}
  probe_lease probe-after 40
  if ((${#probe[@]} > probed)); then
    for arch in "${archs[@]}"; do report "$arch"; done
  fi
fi
if ((${#archs[@]} > 1)); then
  others=()
  for arch in "${archs[@]:1}"; do others+=("$OUT_DIR/bench-$arch.csv"); done
  run_into "$OUT_DIR/report-pooled.txt" python3 "$ROOT/deploy/bench_report.py" \
    "$OUT_DIR/bench-${archs[0]}.csv" --pool-with "${others[@]}" || true
  ((DRY)) || sed -n '/^Pooled with/,$p' "$OUT_DIR/report-pooled.txt"
fi
if [[ -n $ARCHIVE ]]; then
  run_into /dev/null tar czf "$ARCHIVE" -C "$OUT_DIR" . ||
    echo "gpu-grids: packing $OUT_DIR into $ARCHIVE failed" >&2
fi
if ((${#archs[@]} == 0)); then
  echo "gpu-grids: no grid wrote a bench CSV (each grid-ARCH.log says why)" >&2
  exit 1
fi
