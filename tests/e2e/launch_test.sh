#!/usr/bin/env bash
# End-to-end test of deploy/launch.sh with the three real processes:
#  1. the trio comes up, all three report SERVING, server info shows a data-plane round
#     trip, and SIGTERM stops everything with nothing left in /dev/shm;
#  2. killing a worker (SIGKILL) makes launch.sh relaunch it and the trio serve again, and
#     so does killing both at once;
#     killing the coordinator makes launch.sh stop the other two and remove the arena;
#     a worker that keeps dying (past WS_MAX_RESTARTS within WS_RESTART_WINDOW_S) stops
#     everything too, saying why, and deaths further apart are each relaunched; launch.sh
#     itself killed takes its processes with it; a stopped (hung) process is killed past
#     WS_HANG_TIMEOUT_S and handled as a dead one.
set -uo pipefail

ROOT="$1"
BIN="$2"
export WS_BIN="$BIN"
FAILURES=0
PASSES=0
WORK="$(mktemp -d)"
LAUNCH_PID=""
# Whatever ends the test (a failed start, ctest's timeout, a signal), the trio it started
# goes with it: launch.sh stops its processes and removes the arena on TERM.
stop_launch() {
  if [[ -n $LAUNCH_PID ]] && kill -0 "$LAUNCH_PID" 2>/dev/null; then
    kill -TERM "$LAUNCH_PID" 2>/dev/null
    wait "$LAUNCH_PID" 2>/dev/null
  fi
  LAUNCH_PID=""
}
trap 'stop_launch; rm -rf "$WORK"' EXIT
trap 'exit 1' INT TERM
command -v pgrep >/dev/null || { echo "FAIL: pgrep (procps) is not installed"; exit 1; }

fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }
pass() { echo "ok: $*"; PASSES=$((PASSES + 1)); }

start_trio() {  # sets LAUNCH_PID and sources the ready file
  READY="$WORK/ready.$RANDOM"
  "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 --ready-file "$READY" --device "${WS_E2E_DEVICE:-host}" \
    >"$WORK/launch.log" 2>&1 &
  LAUNCH_PID=$!
  # As long as launch.sh itself waits for a phase (WS_START_TIMEOUT_S, 120 s by default).
  for _ in $(seq $((${WS_START_TIMEOUT_S:-120} * 10))); do
    [[ -f "$READY" ]] && break
    kill -0 "$LAUNCH_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -f "$READY" ]]; then
    cat "$WORK/launch.log"
    stop_launch
    return 1
  fi
  # shellcheck disable=SC1090
  source "$READY"
}

pids_of_trio() {  # the trio's pids, from their command lines (they carry the arena or ports)
  pgrep -f -- "$WS_ARENA" || true
  pgrep -f -- "--port_file=$WS_LOG_DIR/" || true
}

wait_gone() {  # wait_gone PID SECONDS
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null; do
    [[ $SECONDS -ge $deadline ]] && return 1
    sleep 0.1
  done
}

# ---- 1. serve and stop on SIGTERM -------------------------------------------------
if start_trio; then
  if "$BIN/wscope" health "$WS_TARGET" "$WS_GPU_WORKER" "$WS_CPU_WORKER" >"$WORK/health"; then
    [[ $(grep -c SERVING "$WORK/health") -eq 3 ]] && pass "all three SERVING" || fail "health: $(cat "$WORK/health")"
  else
    fail "wscope health: $(cat "$WORK/health")"
  fi
  "$BIN/wscope" info --target="$WS_TARGET" >"$WORK/info" 2>&1
  grep -q "data plane round trip" "$WORK/info" && pass "data-plane round trip reported" \
    || fail "server info lacks the data-plane round trip: $(cat "$WORK/info")"
  # The scheduler's start-up calibration of the GPU path (the gpu_worker's probe).
  grep -Eq "GPU path \(probe 1, [0-9]+ ms\): B [0-9.]+ ns/token, c_G [0-9.]+ us per layer" "$WORK/info" \
    && pass "GPU path calibrated at start-up" \
    || fail "server info lacks the GPU path calibration: $(cat "$WORK/info")"
  # And of the CPU path (the cpu_worker's probe of its attention in place).
  grep -Eq "CPU path \(probe 1, [0-9]+ ms\): A [0-9.]+ ns/token, c_C [0-9.]+ us per layer" "$WORK/info" \
    && pass "CPU path calibrated at start-up" \
    || fail "server info lacks the CPU path calibration: $(cat "$WORK/info")"
  # The KV paths through the three processes: the gpu_worker writes a known pattern into
  # blocks of both regions, the cpu_worker verifies its blocks in place in the arena, the
  # gpu_worker verifies the rest through the ping-pong transfer and the D-window.
  if "$BIN/wscope" selftest --target="$WS_TARGET" >"$WORK/selftest" 2>&1; then
    grep -q "selftest: OK" "$WORK/selftest" && pass "selftest OK" || fail "selftest: $(cat "$WORK/selftest")"
    grep -Eq "kv read in place \(cpu_worker.*[1-9][0-9]* layer-blocks.* 0 mismatches" "$WORK/selftest" \
      && pass "cpu_worker verified blocks in place" || fail "cpu_worker checked nothing: $(cat "$WORK/selftest")"
    grep -Eq "ping-pong.*[1-9][0-9]* layer-blocks.* 0 mismatches" "$WORK/selftest" \
      && pass "gpu_worker verified transfer blocks" || fail "gpu_worker checked nothing: $(cat "$WORK/selftest")"
  else
    fail "wscope selftest: $(cat "$WORK/selftest")"
  fi
  "$BIN/wscope" info --target="$WS_TARGET" >"$WORK/info2" 2>&1
  grep -Eq "cpu-compute .* blocks 0/" "$WORK/info2" && pass "selftest freed its blocks" \
    || fail "blocks left after selftest: $(cat "$WORK/info2")"
  [[ $(stat -c %a "/dev/shm$WS_ARENA") == 600 ]] && pass "arena mode 0600" || fail "arena mode"
  TRIO="$(pids_of_trio | sort -u)"
  kill -TERM "$LAUNCH_PID"
  wait_gone "$LAUNCH_PID" 15 && pass "launch.sh stopped on SIGTERM" || fail "launch.sh still running"
  for p in $TRIO; do kill -0 "$p" 2>/dev/null && fail "process $p left running"; done
  [[ -e "/dev/shm$WS_ARENA" ]] && fail "arena left in /dev/shm" || pass "no arena left after SIGTERM"
else
  fail "trio did not start"
fi

# ---- 2. a worker dies: relaunched; the coordinator dies: everything stops -----------
stops_cleanly() {  # stops_cleanly WHAT: launch.sh exits non-zero, nothing left behind
  if wait_gone "$LAUNCH_PID" 15; then
    wait "$LAUNCH_PID"; code=$?
    [[ $code -ne 0 ]] && pass "launch.sh exits non-zero ($code) when $1" \
      || fail "launch.sh exited 0 when $1"
  else
    fail "launch.sh did not stop when $1"
    kill -TERM "$LAUNCH_PID"
  fi
  left=0
  for p in $TRIO; do kill -0 "$p" 2>/dev/null && left=1; done
  for p in $(pids_of_trio); do kill -0 "$p" 2>/dev/null && left=1; done
  [[ $left -eq 0 ]] && pass "no process left when $1" || fail "processes left when $1"
  [[ -e "/dev/shm$WS_ARENA" ]] && fail "arena left when $1" || pass "no arena left when $1"
}
pid_of() {  # pid_of NAME: the trio's process of that name
  local p
  for p in $(pids_of_trio | sort -u); do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == "$1" ]] && { echo "$p"; return 0; }
  done
  return 1
}

serves_again() {  # serves_again NAME OLD_PID TENTHS: another NAME runs and the trio is SERVING
  local new_pid
  for _ in $(seq "$3"); do
    sleep 0.1
    new_pid="$(pid_of "$1")" && [[ "$new_pid" != "$2" ]] || continue
    "$BIN/wscope" health "$WS_TARGET" "$WS_GPU_WORKER" "$WS_CPU_WORKER" >/dev/null 2>&1 && return 0
  done
  return 1
}

if start_trio; then
  for victim in cpu_worker gpu_worker; do
    victim_pid="$(pid_of "$victim")" || { fail "no $victim process found"; continue; }
    kill -KILL "$victim_pid"
    serves_again "$victim" "$victim_pid" 150 && pass "$victim killed: relaunched on its port and the trio serves again" \
      || fail "$victim killed: the trio did not serve again within 15 s: $(tail -3 "$WORK/launch.log")"
    kill -0 "$LAUNCH_PID" 2>/dev/null && pass "launch.sh keeps running after $victim died" \
      || fail "launch.sh stopped after $victim died"
  done
  # Both at once: the second death is seen too (bash reaps it while the first is relaunched,
  # and `wait -n` alone would skip it for as long as the others run).
  gpu_pid="$(pid_of gpu_worker)" && cpu_pid="$(pid_of cpu_worker)" || fail "no workers found"
  kill -KILL "$gpu_pid" "$cpu_pid" 2>/dev/null
  back=0
  for _ in $(seq 200); do
    sleep 0.1
    new_gpu="$(pid_of gpu_worker)" && new_cpu="$(pid_of cpu_worker)" || continue
    [[ "$new_gpu" != "$gpu_pid" && "$new_cpu" != "$cpu_pid" ]] || continue
    if "$BIN/wscope" health "$WS_TARGET" "$WS_GPU_WORKER" "$WS_CPU_WORKER" >/dev/null 2>&1; then
      back=1; break
    fi
  done
  [[ $back -eq 1 ]] && pass "both workers killed at once: both relaunched and the trio serves again" \
    || fail "both workers killed: the trio did not serve again within 20 s: $(tail -4 "$WORK/launch.log")"
  "$BIN/wscope" selftest --target="$WS_TARGET" >"$WORK/selftest2" 2>&1 \
    && pass "self test passes after both workers were relaunched" \
    || fail "self test after relaunch: $(tail -5 "$WORK/selftest2")"
  TRIO="$(pids_of_trio | sort -u)"
  kill -KILL "$(pid_of coordinator)"
  stops_cleanly "the coordinator dies"
else
  fail "trio did not start (worker deaths)"
fi

kill_cpu_worker() {  # kills the cpu_worker; true once another one runs, false if launch.sh ended first
  local victim_pid new_pid
  victim_pid="$(pid_of cpu_worker)" || return 1
  kill -KILL "$victim_pid"
  for _ in $(seq 100); do
    sleep 0.1
    new_pid="$(pid_of cpu_worker)" && [[ "$new_pid" != "$victim_pid" ]] && return 0
    kill -0 "$LAUNCH_PID" 2>/dev/null || return 1
  done
  return 1
}

# A worker that keeps dying: after WS_MAX_RESTARTS relaunches, everything stops.
export WS_MAX_RESTARTS=1
if start_trio; then
  kill_cpu_worker && kill_cpu_worker
  TRIO="$(pids_of_trio | sort -u)"
  stops_cleanly "a worker dies more often than WS_MAX_RESTARTS"
  grep -q "cpu_worker exited .* after 1 relaunches within 600s (WS_MAX_RESTARTS, WS_RESTART_WINDOW_S): giving up" \
    "$WORK/launch.log" && pass "the stop at the restart limit says why" \
    || fail "the stop at the restart limit does not say why: $(tail -3 "$WORK/launch.log")"
else
  fail "trio did not start (restart limit)"
fi

# Deaths further apart than WS_RESTART_WINDOW_S are each relaunched: the limit is for a
# crash loop, not for a service's whole life.
export WS_RESTART_WINDOW_S=3
if start_trio; then
  kill_cpu_worker && sleep 4 && kill_cpu_worker && kill -0 "$LAUNCH_PID" 2>/dev/null \
    && pass "two deaths 4 s apart with WS_MAX_RESTARTS=1 and a 3 s window: both relaunched" \
    || fail "a death past the restart window was not relaunched: $(tail -3 "$WORK/launch.log")"
  stop_launch
else
  fail "trio did not start (restart window)"
fi
unset WS_MAX_RESTARTS WS_RESTART_WINDOW_S

# A process that is alive but stopped (SIGSTOP; a hang looks the same from outside) gives
# no health answer: past WS_HANG_TIMEOUT_S launch.sh kills it, relaunches a worker, and
# stops everything for the coordinator.
export WS_HANG_TIMEOUT_S=4
if start_trio; then
  sleep 6  # a few checks of a healthy trio first: none of them is killed
  grep -q "gave no health answer" "$WORK/launch.log" \
    && fail "a healthy process was taken for hung: $(grep "no health answer" "$WORK/launch.log")" \
    || pass "a healthy trio passes the hang checks (WS_HANG_TIMEOUT_S=4)"
  victim_pid="$(pid_of cpu_worker)" || fail "no cpu_worker process found"
  kill -STOP "$victim_pid"
  back=0
  serves_again cpu_worker "$victim_pid" 300 && back=1
  kill -0 "$victim_pid" 2>/dev/null && { fail "the stopped cpu_worker $victim_pid still exists"; kill -KILL "$victim_pid"; }
  [[ $back -eq 1 ]] && grep -Eq "cpu_worker \(pid $victim_pid\) gave no health answer for [0-9]+s \\(stopped or hung" "$WORK/launch.log" \
    && pass "a stopped cpu_worker is killed, relaunched, and the trio serves again" \
    || fail "a stopped cpu_worker: $(tail -3 "$WORK/launch.log")"
  TRIO="$(pids_of_trio | sort -u)"
  coordinator_pid="$(pid_of coordinator)"
  kill -STOP "$coordinator_pid"
  stops_cleanly "the coordinator is stopped"
  grep -Eq "coordinator \(pid $coordinator_pid\) gave no health answer for [0-9]+s \\(stopped or hung" "$WORK/launch.log" \
    && pass "the stopped coordinator's kill says why" \
    || fail "a stopped coordinator: $(tail -3 "$WORK/launch.log")"
else
  fail "trio did not start (hang timeout)"
fi
unset WS_HANG_TIMEOUT_S

# launch.sh itself killed (kill -9, the OOM killer): its processes end with it (SIGTERM
# from the kernel, WS_SUPERVISOR_PID) and the coordinator removes the arena.
if start_trio; then
  TRIO="$(pids_of_trio | sort -u)"
  kill -KILL "$LAUNCH_PID"
  wait "$LAUNCH_PID" 2>/dev/null
  LAUNCH_PID=""
  gone=0
  for _ in $(seq 150); do
    left=0
    for p in $TRIO; do kill -0 "$p" 2>/dev/null && left=1; done
    [[ $left -eq 0 && ! -e "/dev/shm$WS_ARENA" ]] && { gone=1; break; }
    sleep 0.1
  done
  if [[ $gone -eq 1 ]]; then
    pass "launch.sh killed: its three processes stopped and the arena is gone"
  else
    fail "launch.sh killed: processes or the arena left behind"
    for p in $TRIO; do kill -KILL "$p" 2>/dev/null; done
    rm -f "/dev/shm$WS_ARENA" "/dev/shm$WS_ARENA-synthetic-experts"
  fi
else
  fail "trio did not start (launch.sh killed)"
fi

# ---- 3. a bad model folder: a clear error, nothing left behind ------------------
if "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 -- --model=/nonexistent/model >"$WORK/bad.log" 2>&1; then
  fail "launch.sh succeeded with a missing model folder"
else
  grep -q "/nonexistent/model/config.json" "$WORK/bad.log" && pass "missing model folder named in the error" \
    || fail "no clear error for a missing model: $(tail -5 "$WORK/bad.log")"
fi

# ---- 4a. a restart limit that is not a number: refused before anything starts --------
WS_RESTART_WINDOW_S=ten "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 >"$WORK/window.log" 2>&1
code=$?
[[ $code -eq 2 ]] && grep -q "WS_RESTART_WINDOW_S='ten' is not a whole number" "$WORK/window.log" \
  && pass "a bad WS_RESTART_WINDOW_S refused with exit 2 and a clear error" \
  || fail "bad WS_RESTART_WINDOW_S: exit $code, $(tail -2 "$WORK/window.log")"

# ---- 4b. a bad policy: refused at start-up, naming the accepted forms ---------------
if "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 -- --policy=static:1.5 >"$WORK/policy.log" 2>&1; then
  fail "launch.sh succeeded with --policy=static:1.5"
else
  grep -q "INVALID_ARGUMENT.*1.5" "$WORK/policy.log" && pass "bad policy refused with a clear error" \
    || fail "no clear policy error: $(tail -5 "$WORK/policy.log")"
fi

# ---- 4. a VRAM budget that cannot hold the KV budget: refused at start-up ----------
if "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 --device "${WS_E2E_DEVICE:-host}" \
    -- --vram_budget_gib=0.5 >"$WORK/budget.log" 2>&1; then
  fail "launch.sh succeeded with a VRAM budget below the KV budget"
else
  grep -q "RESOURCE_EXHAUSTED.*VRAM" "$WORK/budget.log" && pass "VRAM budget overflow refused with the numbers" \
    || fail "no clear VRAM budget error: $(tail -5 "$WORK/budget.log")"
fi

echo "$PASSES passed, $FAILURES failed"
[[ $FAILURES -eq 0 ]]
