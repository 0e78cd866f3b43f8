# shellcheck shell=bash
# Sourced by the device-call runners (gpu-grids.sh, ab-grids.sh), which set DRY (1: print
# the commands instead of running them) and OUT_DIR before calling these; bench-grid.sh and
# contention.sh source it for its argument checks (check_grid, check_policies) alone.
#
#   run_into FILE CMD...   runs CMD with its output into FILE, or prints it (DRY)
#   unpack_bundle          unpacks the carried bundle to /tmp/ws (gpu-run.sh), points
#                          LD_LIBRARY_PATH and WS_BIN at it, makes OUT_DIR and writes
#                          OUT_DIR/host.txt (record_host) (not when DRY)
#   record_host FILE       the host the runs share: uptime and load, memory, the CPU's model
#                          and the flags the CPU kernels choose by (AMX, AVX-512 BF16), the
#                          GPU: leases differ (runs 124 and 134-135 ran 1.2-2.9x slower)
#   settle_trios WHO       after a grid: waits up to 30 s until no trio process of the
#                          bundle runs, then kills what still does (not when DRY)
#   check_grid LAYERS BATCHES CONTEXTS POLICIES
#                          refuses (the runner's `fail`, exit 2) a layer count, batch or
#                          context list that is not positive numbers (lists: comma-separated),
#                          or a policy bench-grid.sh would not run (space-separated)
#   check_policies POLICIES
#                          the policies alone, as check_grid checks them
#   arch_contexts ARCH CONTEXTS
#                          prints ARCH's contexts: Mixtral's above 32512 at 32512 (its
#                          context is 32K), duplicates dropped
#   check_out_and_archive  refuses (the runner's `fail`) an OUT_DIR that holds files, and an
#                          ARCHIVE inside OUT_DIR (which it packs)

run_into() {
  local file="$1"
  shift
  if ((DRY)); then
    printf '%q ' "$@"
    echo "> $file"
  else
    "$@" >"$file" 2>&1
  fi
}

unpack_bundle() {
  ((DRY)) && return 0
  "$ROOT/deploy/gpu-run.sh" --unpack-only >/dev/null
  export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
  mkdir -p "$OUT_DIR"
  record_host "$OUT_DIR/host.txt"
}

record_host() {
  {
    echo "date: $(date -u '+%F %T') UTC"
    echo "uptime: $(uptime)"
    echo "nproc: $(nproc)"
    free -g 2>/dev/null | sed 's/^/free: /'
    lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|L3)' | sed 's/^/lscpu: /'
    local flag
    for flag in amx_bf16 amx_tile avx512_bf16 avx512f; do
      if grep -qw "$flag" /proc/cpuinfo 2>/dev/null; then echo "cpu flag $flag: yes"; else echo "cpu flag $flag: no"; fi
    done
    nvidia-smi -L 2>/dev/null | sed 's/^/gpu: /' || true
  } >"$1" 2>&1 || true
}

# A grid stopped by its timeout leaves its trio stopping (launch.sh's trap): the next grid
# must not start beside it. (In run 96 the grid after a timed-out one ran its first two
# points 1.5-1.6x slower than run 95 did; whether the old trio was still there is not known,
# the wait makes sure it is not.)
settle_trios() {
  ((DRY)) && return 0
  local deadline=$(($(date +%s) + 30))
  while pgrep -f "$WS_BIN/(coordinator|gpu_worker|cpu_worker)" >/dev/null; do
    if (($(date +%s) >= deadline)); then
      echo "$1: a trio outlived its grid by 30 s: killed" >&2
      pkill -KILL -f "$WS_BIN/(coordinator|gpu_worker|cpu_worker)" || true
      return 0
    fi
    sleep 1
  done
}

check_grid() {
  local layers="$1" batches="$2" contexts="$3" policies="$4"
  [[ $layers =~ ^[1-9][0-9]*$ ]] || fail "--layers must be a positive number, not '$layers'"
  [[ $batches =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    fail "--batches must be positive numbers separated by commas, not '$batches'"
  [[ $contexts =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    fail "--contexts must be positive numbers separated by commas, not '$contexts'"
  check_policies "$policies"
}

check_policies() {
  local policies="$1" policy
  local -a list
  read -r -a list <<<"$policies"
  ((${#list[@]} > 0)) || fail "no policy given"
  for policy in "${list[@]}"; do
    [[ $policy =~ ^(writescope|transfer-all|cpu-all|monolithic|static:(0(\.[0-9]+)?|1(\.0+)?))$ ]] ||
      fail "unknown policy '$policy' (writescope, transfer-all, cpu-all, static:R, monolithic)"
  done
}

arch_contexts() {
  if [[ $1 == mixtral ]]; then
    tr ',' '\n' <<<"$2" | awk '{print ($1 > 32512 ? 32512 : $1)}' | awk '!seen[$0]++' |
      paste -sd, -
  else
    echo "$2"
  fi
}

check_out_and_archive() {
  case "$ARCHIVE" in
    "$OUT_DIR"/*) fail "--archive '$ARCHIVE' lies inside --out '$OUT_DIR', which it packs" ;;
  esac
  # A used folder would mix runs: the grids append to its CSVs (the reports would merge an
  # earlier call's rows as repeats) and --archive packs whatever is there. A warm device
  # keeps /tmp between calls (run 191's archive held run 190's grids).
  if [[ -d $OUT_DIR && -n $(ls -A "$OUT_DIR" 2>/dev/null) ]]; then
    fail "--out '$OUT_DIR' is not empty (an earlier call's grids?): give a new folder"
  fi
}
