#!/usr/bin/env bash
# Starts the WriteScope trio (gpu_worker, cpu_worker, coordinator), waits until all
# three report SERVING, then supervises them. A worker that dies is relaunched on its port
# after WS_RELAUNCH_DELAY_S (default 1 s), at most WS_MAX_RESTARTS times (default 5) within
# WS_RESTART_WINDOW_S (default 600 s): the coordinator ends the requests in flight with
# UNAVAILABLE, reports NOT_SERVING, and serves again once it has reloaded the worker. On
# SIGINT/SIGTERM, when the coordinator dies, or past the restart limit, it stops the others
# and removes the shared-memory arena, so no process and no /dev/shm segment is left behind.
# Should launch.sh itself die (kill -9), its three processes get SIGTERM and stop the same
# way (WS_SUPERVISOR_PID). A process that is alive but gives no health answer for
# WS_HANG_TIMEOUT_S (default 60 s; 0: never) is stopped or hung: launch.sh kills it
# (SIGKILL), and it is then treated as dead (a worker relaunched, the coordinator's death
# stops everything).
#
#   deploy/launch.sh [--listen HOST:PORT] [--bin DIR] [--ready-file FILE] [--device auto|cuda|host]
#                    [--cpu-worker-flag FLAG]... [--gpu-worker-flag FLAG]... [-- COORDINATOR_FLAGS...]
#
# The model: coordinator flag --model=FOLDER or --synthetic=ARCH [--num_layers=N]; without
# either, the embedded default (tests/fixtures/qwen3_moe, a tiny Qwen3-MoE) is served.
#
# Internal services listen on 127.0.0.1 only, on ports the kernel picks. The arena is
# named /ws-<pid>-<random> (fresh per launch) and created with mode 0600. Once the trio
# serves, FILE (if given) receives shell assignments: WS_TARGET, WS_GPU_WORKER,
# WS_CPU_WORKER, WS_ARENA, WS_LOG_DIR.
#
# Cores: the cpu_worker runs nproc - WS_RESERVED_CORES (default 1) OpenMP threads, or
# WS_CPU_WORKER_THREADS, spinning WS_CPU_WORKER_SPINCOUNT (default 20000) after a parallel
# region and, with a GPU, from one of a step's messages to the next (WS_CPU_WORKER_HOLD_US,
# default 20000 there, 0 elsewhere); the gpu_worker and the coordinator run with
# OMP_WAIT_POLICY=passive, the gpu_worker with WS_GPU_WORKER_THREADS OpenMP threads if set.
# WS_PIN_THREADS (default off): cpu binds the cpu_worker's OpenMP threads one to a core, on
# the allowed cores after the first WS_RESERVED_CORES; all also keeps the gpu_worker and the
# coordinator on those first cores (taskset).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${WS_BIN:-$ROOT/build/bin}"
LISTEN="127.0.0.1:50051"
READY_FILE=""
DEVICE="auto"
START_TIMEOUT_S="${WS_START_TIMEOUT_S:-120}"
COORDINATOR_ARGS=()
CPU_WORKER_ARGS=()
GPU_WORKER_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --listen) LISTEN="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --ready-file) READY_FILE="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --cpu-worker-flag) CPU_WORKER_ARGS+=("$2"); shift 2 ;;
    --gpu-worker-flag) GPU_WORKER_ARGS+=("$2"); shift 2 ;;
    --) shift; COORDINATOR_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;  # the comment block above
    *) echo "launch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# The embedded default model: the tiny Qwen3-MoE the tests check against transformers.
model_flag=' --(model|synthetic)[= ]'
if [[ ! " ${COORDINATOR_ARGS[*]-} " =~ $model_flag ]]; then
  COORDINATOR_ARGS+=("--model=${WS_MODEL:-$ROOT/tests/fixtures/qwen3_moe}")
fi
for b in coordinator gpu_worker cpu_worker wscope; do
  [[ -x "$BIN/$b" ]] || { echo "launch.sh: $BIN/$b not found; build first (deploy/setup.sh)" >&2; exit 2; }
done

RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ws-launch.XXXXXX")"
ARENA="/ws-$$-$RANDOM$RANDOM"
PIDS=()
NAMES=()
STOPPING=0

log() { echo "[launch] $*" >&2; }

stop_all() {
  [[ $STOPPING -eq 1 ]] && return
  STOPPING=1
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # Give them a few seconds to stop in order, then make sure.
  for _ in $(seq 50); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -f "/dev/shm$ARENA" "/dev/shm$ARENA-synthetic-experts"
  [[ -n "$READY_FILE" ]] && rm -f "$READY_FILE"
  log "stopped; logs in $RUN_DIR"
}

on_signal() {
  log "signal received, stopping the trio"
  stop_all
  exit 0
}
trap on_signal INT TERM
trap stop_all EXIT

WRAP=()  # what start runs a process through (env, taskset: both exec it, so $! is its pid)
start() {  # start NAME ARGS...
  local name="$1"; shift
  # WS_SUPERVISOR_PID: the process ends with this shell, however the shell dies (kill -9
  # too), so none outlives it holding the arena (common/process.h, EndWithSupervisor).
  # Taken here: inside the background command, $BASHPID would be the child's own.
  local supervisor=$BASHPID
  WS_SUPERVISOR_PID=$supervisor ${WRAP[@]+"${WRAP[@]}"} "$BIN/$name" "$@" >"$RUN_DIR/$name.log" 2>&1 &
  PIDS+=("$!")
  NAMES+=("$name")
}

dead_process() {  # prints the name of a process that exited, if any
  local i
  for i in "${!PIDS[@]}"; do
    if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then echo "${NAMES[$i]}"; return 0; fi
  done
  return 1
}

fail_start() {
  log "$1"
  local name
  for name in "${NAMES[@]}"; do
    echo "---- last lines of $name.log ----" >&2
    tail -n 20 "$RUN_DIR/$name.log" >&2 || true
  done
  exit 1
}

wait_for_file() {  # wait_for_file PATH WHAT
  local deadline=$((SECONDS + START_TIMEOUT_S))
  while [[ ! -s "$1" ]]; do
    if dead=$(dead_process); then fail_start "$dead exited while starting"; fi
    [[ $SECONDS -ge $deadline ]] && fail_start "timed out waiting for $2"
    sleep 0.05
  done
}

# The cores. The cpu_worker's OpenMP threads (attention, routed experts) spin between
# parallel regions and fill every core they get; the gpu_worker's one driving thread must
# not wait for a core while both paths attend at once (it issues the copies and kernels of
# the GPU path). So the cpu_worker gets all cores but WS_RESERVED_CORES (default 1), or
# WS_CPU_WORKER_THREADS if set; the gpu_worker and the coordinator may use every core for
# their own parallel loops (long prefill chunks) but their idle threads sleep at once
# (OMP_WAIT_POLICY=passive) instead of spinning on the cpu_worker's cores. The
# cpu_worker's own threads spin GOMP_SPINCOUNT (WS_CPU_WORKER_SPINCOUNT, default 20000,
# about 0.3 ms) after a parallel region, not libgomp's default 300000 (several ms): the
# gpu_worker's host work right after the experts (the next layer's norms, the sampling)
# would otherwise find 15 cores busy spinning.
CORES="$(nproc)"
if [[ -n ${WS_GPU_WORKER_THREADS:-} && ! $WS_GPU_WORKER_THREADS =~ ^[1-9][0-9]*$ ]]; then
  echo "launch.sh: WS_GPU_WORKER_THREADS='$WS_GPU_WORKER_THREADS' is not a thread count (1 or more)" >&2
  exit 2
fi
for var in WS_MAX_RESTARTS WS_RESTART_WINDOW_S WS_HANG_TIMEOUT_S; do
  if [[ -n ${!var:-} && ! ${!var} =~ ^[0-9]+$ ]]; then
    echo "launch.sh: $var='${!var}' is not a whole number (0 or more)" >&2
    exit 2
  fi
done
CPU_WORKER_SPINCOUNT="${WS_CPU_WORKER_SPINCOUNT:-20000}"
CPU_WORKER_THREADS="${WS_CPU_WORKER_THREADS:-$((CORES - ${WS_RESERVED_CORES:-1}))}"
[[ $CPU_WORKER_THREADS -ge 1 ]] || CPU_WORKER_THREADS=1
# While a step is in flight, the cpu_worker's team spins from one message to the next
# (--hold_threads_us, WS_CPU_WORKER_HOLD_US): every call of a step comes more than the
# spin's 0.3 ms after the last (runs 25 and 73), and a team that fell asleep wakes slowly.
# On the H200 (Qwen3, runs 132 and 134) the steps were 0-21 % shorter with it, the most at
# small batches, and the CPU experts 0.5-3.5 ms shorter per 4-layer step. On by default where a GPU does the GPU side and the team has
# cores of its own (4+ threads); off on a host device, whose gpu_worker attends on the
# same cores. A later --cpu-worker-flag --hold_threads_us=N wins.
if [[ -z ${WS_CPU_WORKER_HOLD_US:-} ]]; then
  WS_CPU_WORKER_HOLD_US=0
  if [[ $DEVICE != host && $CPU_WORKER_THREADS -ge 4 ]] && [[ $DEVICE == cuda || -e /dev/nvidia0 ]]; then
    WS_CPU_WORKER_HOLD_US=20000
  fi
fi
CPU_WORKER_ARGS=(--hold_threads_us="$WS_CPU_WORKER_HOLD_US" ${CPU_WORKER_ARGS[@]+"${CPU_WORKER_ARGS[@]}"})
log "cores: $CORES; cpu_worker OpenMP threads: $CPU_WORKER_THREADS, held between a step's messages for $WS_CPU_WORKER_HOLD_US us"

# Pinning (WS_PIN_THREADS). Unpinned, the kernel may put two of the team's threads, or one
# of them and the gpu_worker's driving thread, on one core for a while; the team's parallel
# loops then wait for the thread that got half a core.
allowed_cpus() {  # the CPUs this shell may run on, one per line ("0-3,8" -> 0 1 2 3 8)
  local list item
  list=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  IFS=, read -ra items <<< "$list"
  for item in "${items[@]}"; do
    if [[ $item == *-* ]]; then seq "${item%-*}" "${item#*-}"; else echo "$item"; fi
  done
}
PIN="${WS_PIN_THREADS:-off}"
CPU_WORKER_WRAP=() SIDE_WRAP=()
case "$PIN" in
  off) ;;
  cpu|all)
    mapfile -t cpus < <(allowed_cpus)
    reserved="${WS_RESERVED_CORES:-1}"
    if ((${#cpus[@]} <= reserved)); then
      log "WS_PIN_THREADS=$PIN: ${#cpus[@]} core(s) and $reserved reserved leave none to pin the cpu_worker to; not pinning"
    else
      team=("${cpus[@]:reserved}")
      places=$(printf '{%s},' "${team[@]}")
      # OMP_DISPLAY_AFFINITY: each thread's binding in cpu_worker.log, to check on a host.
      CPU_WORKER_WRAP=(env OMP_PROC_BIND=close "OMP_PLACES=${places%,}" OMP_DISPLAY_AFFINITY=true)
      what="the cpu_worker's threads one to a core on ${team[*]}"
      if [[ $PIN == all ]]; then
        if ((reserved == 0)); then
          log "WS_PIN_THREADS=all with WS_RESERVED_CORES=0: no core left for the gpu_worker and the coordinator; they stay unpinned"
        elif ! command -v taskset >/dev/null; then
          log "WS_PIN_THREADS=all: taskset not found; the gpu_worker and the coordinator stay unpinned"
        else
          side=$(IFS=,; echo "${cpus[*]:0:reserved}")
          SIDE_WRAP=(taskset -c "$side")
          what+="; the gpu_worker and the coordinator on $side"
        fi
      fi
      log "pinning: $what"
    fi
    ;;
  *) echo "launch.sh: WS_PIN_THREADS='$PIN' is not off, cpu or all" >&2; exit 2 ;;
esac

start_worker() {  # start_worker NAME PORT: (re)starts a worker on PORT (0: a free one)
  local name="$1" port="$2"
  if [[ $name == gpu_worker ]]; then
    local args=(--port="$port" --port_file="$RUN_DIR/gpu_worker.port" --device="$DEVICE"
                ${GPU_WORKER_ARGS[@]+"${GPU_WORKER_ARGS[@]}"})
    # WS_GPU_WORKER_THREADS: the gpu_worker's OpenMP threads (unset: OpenMP's default, every
    # core). Its parallel loops in a decode step (the sampling) meet the cpu_worker's held
    # team on every other core.
    WRAP=(${SIDE_WRAP[@]+"${SIDE_WRAP[@]}"})
    if [[ -n ${WS_GPU_WORKER_THREADS:-} ]]; then
      OMP_NUM_THREADS="$WS_GPU_WORKER_THREADS" OMP_WAIT_POLICY=passive start gpu_worker "${args[@]}"
    else
      OMP_WAIT_POLICY=passive start gpu_worker "${args[@]}"
    fi
  else
    WRAP=(${CPU_WORKER_WRAP[@]+"${CPU_WORKER_WRAP[@]}"})
    OMP_NUM_THREADS="$CPU_WORKER_THREADS" GOMP_SPINCOUNT="$CPU_WORKER_SPINCOUNT" start cpu_worker --port="$port" \
      --port_file="$RUN_DIR/cpu_worker.port" ${CPU_WORKER_ARGS[@]+"${CPU_WORKER_ARGS[@]}"}
  fi
  WRAP=()
}

start_worker gpu_worker 0
start_worker cpu_worker 0
wait_for_file "$RUN_DIR/gpu_worker.port" "the gpu_worker's port"
wait_for_file "$RUN_DIR/cpu_worker.port" "the cpu_worker's port"
GPU_ADDR="127.0.0.1:$(cat "$RUN_DIR/gpu_worker.port")"
CPU_ADDR="127.0.0.1:$(cat "$RUN_DIR/cpu_worker.port")"

WRAP=(${SIDE_WRAP[@]+"${SIDE_WRAP[@]}"})
OMP_WAIT_POLICY=passive start coordinator --listen="$LISTEN" --port_file="$RUN_DIR/coordinator.port" \
  --gpu_worker="$GPU_ADDR" --cpu_worker="$CPU_ADDR" --arena="$ARENA" "${COORDINATOR_ARGS[@]}"
WRAP=()
wait_for_file "$RUN_DIR/coordinator.port" "the coordinator's port"
TARGET="${LISTEN%:*}:$(cat "$RUN_DIR/coordinator.port")"

deadline=$((SECONDS + START_TIMEOUT_S))
until "$BIN/wscope" health "$TARGET" "$GPU_ADDR" "$CPU_ADDR" >/dev/null 2>&1; do
  if dead=$(dead_process); then fail_start "$dead exited while starting"; fi
  [[ $SECONDS -ge $deadline ]] && fail_start "the trio did not report SERVING within ${START_TIMEOUT_S}s"
  sleep 0.2
done
log "serving: coordinator $TARGET, gpu_worker $GPU_ADDR, cpu_worker $CPU_ADDR, arena $ARENA"
log "logs in $RUN_DIR"
if [[ -n "$READY_FILE" ]]; then
  printf 'WS_TARGET=%s\nWS_GPU_WORKER=%s\nWS_CPU_WORKER=%s\nWS_ARENA=%s\nWS_LOG_DIR=%s\n' \
    "$TARGET" "$GPU_ADDR" "$CPU_ADDR" "$ARENA" "$RUN_DIR" >"$READY_FILE.tmp"
  mv "$READY_FILE.tmp" "$READY_FILE"
fi

# Supervise: a worker that dies is relaunched on its port (the coordinator ends the
# requests in flight with UNAVAILABLE, reports NOT_SERVING, and reloads it when it is back),
# up to WS_MAX_RESTARTS relaunches (both workers together) within WS_RESTART_WINDOW_S
# seconds; a death past that (a crash loop) or the coordinator dying (or a signal) stops
# them all.
MAX_RESTARTS="${WS_MAX_RESTARTS:-5}"
RESTART_WINDOW_S="${WS_RESTART_WINDOW_S:-600}"
RELAUNCH_DELAY_S="${WS_RELAUNCH_DELAY_S:-1}"  # back off a little before each relaunch
RESTARTS=0          # relaunches since the start (they number the dead workers' logs)
RESTART_TIMES=()    # $SECONDS of the relaunches within the window

# A process that is alive but gives no health answer (SERVING or not) for HANG_TIMEOUT_S is
# stopped (SIGSTOP) or hung: the coordinator sees only a worker that stopped answering and
# would wait for it for good, so launch.sh kills it and the death is handled as any other.
# Checked every HANG_CHECK_S by one `wscope health` over the three addresses; a relaunched
# worker has START_TIMEOUT_S (at least HANG_TIMEOUT_S) to answer first.
# A check costs a wscope process (~45 ms of one core on a 2-core host): every 10 s at most.
HANG_TIMEOUT_S="${WS_HANG_TIMEOUT_S:-60}"
HANG_CHECK_S=$((HANG_TIMEOUT_S / 4 > 10 ? 10 : (HANG_TIMEOUT_S / 4 < 1 ? 1 : HANG_TIMEOUT_S / 4)))
LAST_HANG_CHECK=$SECONDS
declare -A ANSWER_BY=()  # name -> $SECONDS by which it must answer a health check
declare -A SILENT_SINCE=()  # name -> $SECONDS of its last answer (or its launch)
answer_window() {  # answer_window NAME SECONDS: NAME must answer within SECONDS from now
  ANSWER_BY[$1]=$((SECONDS + $2))
  SILENT_SINCE[$1]=$SECONDS
}
for name in "${NAMES[@]}"; do answer_window "$name" "$HANG_TIMEOUT_S"; done
check_hangs() {  # kills a process past its time to answer a health check
  ((HANG_TIMEOUT_S > 0 && SECONDS - LAST_HANG_CHECK >= HANG_CHECK_S)) || return 0
  LAST_HANG_CHECK=$SECONDS
  local i name address state addresses=()
  declare -A address_of=([coordinator]="$TARGET" [gpu_worker]="$GPU_ADDR" [cpu_worker]="$CPU_ADDR")
  declare -A state_of=()
  for name in "${NAMES[@]}"; do addresses+=("${address_of[$name]}"); done
  # In the background, so that a signal is handled at once rather than after the check
  # (each address that does not answer takes wscope's 2 s). Its stdout only: one line per
  # address, the address, then SERVING, NOT_SERVING or UNREACHABLE (why).
  "$BIN/wscope" health --wait=0s "${addresses[@]}" >"$RUN_DIR/hang_check" 2>/dev/null &
  wait $! || true
  [[ $STOPPING -eq 1 ]] && return 0
  while read -r address state; do state_of[$address]=$state; done <"$RUN_DIR/hang_check"
  for i in "${!NAMES[@]}"; do
    name=${NAMES[$i]}
    state=${state_of[${address_of[$name]}]:-}
    if [[ $state == SERVING || $state == NOT_SERVING ]]; then
      answer_window "$name" "$HANG_TIMEOUT_S"
    elif ((SECONDS >= ANSWER_BY[$name])) && kill -0 "${PIDS[$i]}" 2>/dev/null; then
      log "$name (pid ${PIDS[$i]}) gave no health answer for $((SECONDS - SILENT_SINCE[$name]))s (stopped or hung: ${state:-no answer}); killing it (WS_HANG_TIMEOUT_S)"
      kill -KILL "${PIDS[$i]}" 2>/dev/null || true
    fi
  done
}
# `wait -n -p` (which child ended) is bash 5.1's; before it, the status comes from `wait PID`.
WAIT_WHICH=(-p waited)
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 501)) || WAIT_WHICH=()
while true; do
  # A process that died while another was being relaunched, or beside the one `wait -n`
  # reported, is found here: bash has reaped it already, and `wait -n` would skip it ("no
  # such job") for as long as the others run. The tick bounds that to 2 s should one die
  # between this look and the wait.
  waited="" waited_code=""
  if ! dead="$(dead_process)"; then
    sleep 2 &
    TICK_PID=$!
    set +e
    wait -n ${WAIT_WHICH[@]+"${WAIT_WHICH[@]}"} "${PIDS[@]}" "$TICK_PID"
    waited_code=$?
    set -e
    kill "$TICK_PID" 2>/dev/null || true
    [[ $STOPPING -eq 1 ]] && break
    if ! dead="$(dead_process)"; then  # the tick: all alive
      check_hangs
      continue
    fi
  fi
  # Its exit status: the one `wait -n` reported, or the one bash kept for it.
  code="unknown"
  for i in "${!NAMES[@]}"; do
    [[ ${NAMES[$i]} == "$dead" ]] || continue
    if [[ ${PIDS[$i]} == "$waited" ]]; then
      code=$waited_code
    else
      set +e
      wait "${PIDS[$i]}" 2>/dev/null
      code=$?
      set -e
    fi
  done
  recent=()
  for t in ${RESTART_TIMES[@]+"${RESTART_TIMES[@]}"}; do
    ((SECONDS - t < RESTART_WINDOW_S)) && recent+=("$t")
  done
  RESTART_TIMES=(${recent[@]+"${recent[@]}"})
  if [[ ($dead == gpu_worker || $dead == cpu_worker) && ${#RESTART_TIMES[@]} -lt $MAX_RESTARTS ]]; then
    RESTARTS=$((RESTARTS + 1))
    RESTART_TIMES+=("$SECONDS")
    for i in "${!NAMES[@]}"; do
      if [[ ${NAMES[$i]} == "$dead" ]]; then unset 'PIDS[i]' 'NAMES[i]'; fi
    done
    PIDS=("${PIDS[@]}")
    NAMES=("${NAMES[@]}")
    port="$(cat "$RUN_DIR/$dead.port")"
    mv "$RUN_DIR/$dead.log" "$RUN_DIR/$dead.$RESTARTS.log" 2>/dev/null || true
    log "$dead exited (status $code); relaunching it on port $port in ${RELAUNCH_DELAY_S}s (restart ${#RESTART_TIMES[@]} of $MAX_RESTARTS within ${RESTART_WINDOW_S}s; $RESTARTS in all)"
    sleep "$RELAUNCH_DELAY_S"
    [[ $STOPPING -eq 1 ]] && break
    start_worker "$dead" "$port"
    answer_window "$dead" $((START_TIMEOUT_S > HANG_TIMEOUT_S ? START_TIMEOUT_S : HANG_TIMEOUT_S))
    continue
  fi
  if [[ $dead == gpu_worker || $dead == cpu_worker ]]; then
    log "$dead exited (status $code) after $MAX_RESTARTS relaunches within ${RESTART_WINDOW_S}s (WS_MAX_RESTARTS, WS_RESTART_WINDOW_S): giving up; stopping the others"
  else
    log "$dead exited (status $code); stopping the others"
  fi
  stop_all
  exit 1
done
