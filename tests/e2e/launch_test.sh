#!/usr/bin/env bash
# End-to-end test of deploy/launch.sh with the three real processes:
#  1. the trio comes up, all three report SERVING, server info shows a data-plane round
#     trip, and SIGTERM stops everything with nothing left in /dev/shm;
#  2. killing any one process (SIGKILL) makes launch.sh stop the other two and remove
#     the arena.
set -uo pipefail

ROOT="$1"
BIN="$2"
export WS_BIN="$BIN"
FAILURES=0
PASSES=0
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*"; FAILURES=$((FAILURES + 1)); }
pass() { echo "ok: $*"; PASSES=$((PASSES + 1)); }

start_trio() {  # sets LAUNCH_PID and sources the ready file
  READY="$WORK/ready.$RANDOM"
  "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 --ready-file "$READY" --device "${WS_E2E_DEVICE:-host}" \
    >"$WORK/launch.log" 2>&1 &
  LAUNCH_PID=$!
  for _ in $(seq 300); do
    [[ -f "$READY" ]] && break
    kill -0 "$LAUNCH_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -f "$READY" ]]; then
    cat "$WORK/launch.log"
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

# ---- 2. one process dies: the rest stop ------------------------------------------
for victim in cpu_worker gpu_worker coordinator; do
  if ! start_trio; then fail "trio did not start (victim $victim)"; continue; fi
  TRIO="$(pids_of_trio | sort -u)"
  [[ $(wc -w <<<"$TRIO") -eq 3 ]] || fail "expected 3 trio processes, found: $TRIO"
  victim_pid=""
  for p in $TRIO; do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == "$victim" ]] && victim_pid=$p
  done
  if [[ -z "$victim_pid" ]]; then fail "no $victim process found"; kill -TERM "$LAUNCH_PID"; wait; continue; fi
  kill -KILL "$victim_pid"
  if wait_gone "$LAUNCH_PID" 15; then
    wait "$LAUNCH_PID"; code=$?
    [[ $code -ne 0 ]] && pass "launch.sh exits non-zero ($code) when $victim dies" \
      || fail "launch.sh exited 0 after $victim died"
  else
    fail "launch.sh did not stop after $victim died"
    kill -TERM "$LAUNCH_PID"
  fi
  left=0
  for p in $TRIO; do kill -0 "$p" 2>/dev/null && left=1; done
  [[ $left -eq 0 ]] && pass "no process left after $victim died" || fail "processes left after $victim died"
  [[ -e "/dev/shm$WS_ARENA" ]] && fail "arena left after $victim died" || pass "no arena left after $victim died"
done

# ---- 3. a bad model folder: a clear error, nothing left behind ------------------
if "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 -- --model=/nonexistent/model >"$WORK/bad.log" 2>&1; then
  fail "launch.sh succeeded with a missing model folder"
else
  grep -q "/nonexistent/model/config.json" "$WORK/bad.log" && pass "missing model folder named in the error" \
    || fail "no clear error for a missing model: $(tail -5 "$WORK/bad.log")"
fi

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
