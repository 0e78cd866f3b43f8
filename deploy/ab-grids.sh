#!/usr/bin/env bash
# An A/B of flags on the GPU machine, in one device call: for one model shape, each variant's
# trio runs the decode grid (deploy/bench-grid.sh, one repeat, a fresh trio), the variants
# interleaved REPEATS times so that the host's drift weighs on each alike, in reverse order
# on every second repeat so that no variant always runs first (run 111: the first variant of
# each pair 3-7 % slower at the first point, cause not separated), each into its own
# DIR/NAME/; then deploy/ab_report.py compares them and the modes per variant are written.
#
#   deploy/ab-grids.sh --out DIR --arch qwen3_moe|mixtral|deepseek_v2 [--repeats 2]
#       [--steps 16] [--policy writescope] [--budget-s 560] [--archive FILE] [--dry-run]
#       [--layers 4] [--batches 4,16,32] [--contexts 8192,32768] VARIANT [VARIANT...]
#
# The grid is gpu-grids.sh's (Mixtral's contexts above 32512 at 32512); --layers, --batches
# and --contexts change it (the full DeepSeek-V2-Lite at one point: --layers 27 --batches 32
# --contexts 32768).
# VARIANT: NAME or NAME:FLAG[:FLAG...]; a FLAG is a coordinator flag (--x=y), or a worker's
# prefixed cpu_worker/ or gpu_worker/, or an environment variable of launch.sh's
# (env/WS_NAME=VALUE, e.g. spin100k:env/WS_CPU_WORKER_SPINCOUNT=100000: how long the
# cpu_worker's OpenMP threads spin before they sleep). For example (session 17's three rules):
#   base  nosettle:--settle_missed_rounds=false  nohold:--exploration_share_hold=0
#   nomap:cpu_worker/--prefault_kv=false  (session 18's:) nomodehold:--mode_switch_hold_steps=0
#   (session 19's:) late:gpu_worker/--early_rounds_after_attention=false
#   (session 20's:) w128:--window_tokens=128  noreaderhold:--hold_queued_readers=false
# A variant whose trio runs past what is left of --budget-s is cut by `timeout` (its rows
# so far stay) and the later ones are skipped, so the call comes home within its limit.
# --archive FILE packs DIR (keep it outside DIR); --dry-run prints the commands. Exit 1 when
# the budget cut a variant short or skipped one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=deploy/device-grids-lib.sh
source "$ROOT/deploy/device-grids-lib.sh"
OUT_DIR="" ARCH="" REPEATS=2 STEPS=16 POLICY=writescope BUDGET=560 ARCHIVE="" DRY=0
LAYERS=4 BATCHES=4,16,32 CONTEXTS=8192,32768
VARIANTS=()
fail() { echo "ab-grids.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --policy) POLICY="$2"; shift 2 ;;
    --budget-s) BUDGET="$2"; shift 2 ;;
    --archive) ARCHIVE="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --contexts) CONTEXTS="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    -*) fail "unknown option '$1' (see --help)" ;;
    *) VARIANTS+=("$1"); shift ;;
  esac
done
[[ -n $OUT_DIR ]] || fail "--out DIR is required"
case "$ARCH" in
  qwen3_moe|deepseek_v2|mixtral) ;;
  *) fail "--arch must be qwen3_moe, mixtral or deepseek_v2, not '$ARCH'" ;;
esac
check_grid "$LAYERS" "$BATCHES" "$CONTEXTS" "$POLICY"
[[ $POLICY != *" "* ]] || fail "--policy takes one policy, not '$POLICY'"
CONTEXTS=$(arch_contexts "$ARCH" "$CONTEXTS")
for number in "$REPEATS" "$STEPS" "$BUDGET"; do
  [[ $number =~ ^[1-9][0-9]*$ ]] || fail "--repeats, --steps and --budget-s take positive numbers, not '$number'"
done
((${#VARIANTS[@]} >= 2)) || fail "an A/B needs two variants or more"
check_out_and_archive
# Each variant's flags, checked before anything runs: the coordinator's (one per line) and
# the workers' (space-separated, as bench-trio.sh takes them).
declare -A seen=() coordinator_flags=() cpu_flags=() gpu_flags=() env_vars=()
names=()
for variant in "${VARIANTS[@]}"; do
  name=${variant%%:*}
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || fail "variant name '$name' must be letters, digits, '_', '.', '-'"
  [[ -z ${seen[$name]:-} ]] || fail "variant '$name' given twice"
  seen[$name]=1
  names+=("$name")
  coordinator_flags[$name]="" cpu_flags[$name]="" gpu_flags[$name]="" env_vars[$name]=""
  [[ $variant == *:* ]] || continue
  IFS=: read -r -a flags <<<"${variant#*:}"
  for flag in "${flags[@]}"; do
    case "$flag" in
      cpu_worker/--*) cpu_flags[$name]+="${cpu_flags[$name]:+ }${flag#cpu_worker/}" ;;
      gpu_worker/--*) gpu_flags[$name]+="${gpu_flags[$name]:+ }${flag#gpu_worker/}" ;;
      env/*)
        [[ ${flag#env/} =~ ^WS_[A-Z0-9_]+=[^[:space:]]*$ ]] ||
          fail "variant '$name': '$flag' is not env/WS_NAME=VALUE"
        env_vars[$name]+="${flag#env/}"$'\n' ;;
      --*) coordinator_flags[$name]+="$flag"$'\n' ;;
      *) fail "variant '$name': '$flag' is neither --flag nor cpu_worker/--flag nor gpu_worker/--flag nor env/WS_NAME=VALUE" ;;
    esac
  done
done

unpack_bundle
start=$(date +%s)
out_of_time=0
for repeat in $(seq "$REPEATS"); do
  order=("${names[@]}")
  if ((repeat % 2 == 0)); then
    order=()
    for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[i]}"); done
  fi
  for name in "${order[@]}"; do
    coordinator=() envs=()
    while IFS= read -r flag; do
      [[ -n $flag ]] && coordinator+=("$flag")
    done <<<"${coordinator_flags[$name]}"
    while IFS= read -r assignment; do
      [[ -n $assignment ]] && envs+=("$assignment")
    done <<<"${env_vars[$name]}"
    # 20 s kept back for the reports and the copy home.
    left=$((BUDGET - ($(date +%s) - start) - 20))
    if ((left < 30)); then
      echo "ab-grids: out of time before $name, repeat $repeat"
      out_of_time=1
      break 2
    fi
    ((DRY)) || mkdir -p "$OUT_DIR/$name"
    echo "ab-grids: $name, repeat $repeat of $REPEATS, at most $left s"
    rc=0
    run_into "$OUT_DIR/$name/grid-$repeat.log" env ${envs[@]+"${envs[@]}"} \
      WS_CPU_WORKER_FLAGS="${cpu_flags[$name]}" WS_GPU_WORKER_FLAGS="${gpu_flags[$name]}" timeout "$left" "$ROOT/deploy/bench-grid.sh" \
      --arch "$ARCH" --policies "$POLICY" --layers "$LAYERS" --batches "$BATCHES" \
      --contexts "$CONTEXTS" --warmup 16 --steps "$STEPS" --repeats 1 --out "$OUT_DIR/$name" \
      ${coordinator[@]+-- "${coordinator[@]}"} || rc=$?
    echo "ab-grids: $name ended (exit $rc)"
    ((rc != 124)) || out_of_time=1
    settle_trios ab-grids
  done
done
dirs=()
for name in "${names[@]}"; do dirs+=("$OUT_DIR/$name"); done
run_into "$OUT_DIR/ab-report.txt" python3 "$ROOT/deploy/ab_report.py" --arch "$ARCH" \
  --policy "$POLICY" "${dirs[@]}" || true
for name in "${names[@]}"; do
  run_into "$OUT_DIR/$name/modes-$ARCH.txt" python3 "$ROOT/deploy/modes_report.py" \
    "$OUT_DIR/$name/steps-$ARCH.csv" --warmup "$OUT_DIR/$name/warmup-$ARCH.csv" || true
done
if [[ -n $ARCHIVE ]]; then
  run_into /dev/null tar czf "$ARCHIVE" -C "$OUT_DIR" . ||
    echo "ab-grids: packing $OUT_DIR into $ARCHIVE failed" >&2
fi
((DRY)) || cat "$OUT_DIR/ab-report.txt"
exit "$out_of_time"
