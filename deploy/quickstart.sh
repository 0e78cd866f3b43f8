#!/usr/bin/env bash
# The main job: sets up if needed, builds, launches the trio on its embedded default model
# (the tiny Qwen3-MoE of tests/fixtures), shows that it serves (health of all three
# processes, server info, the data-plane and KV self test), streams one generation with its
# timing summary (time to first token, prefill and decode split, tokens/s) and the profile
# summary of its last steps (per process and phase, with a Chrome trace), then stops it
# cleanly.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/deploy/setup.sh"
BIN="$ROOT/build/bin"

READY="$(mktemp -u "${TMPDIR:-/tmp}/ws-ready.XXXXXX")"
"$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 --ready-file "$READY" &
LAUNCH_PID=$!
cleanup() { kill -TERM "$LAUNCH_PID" 2>/dev/null || true; wait "$LAUNCH_PID" 2>/dev/null || true; }
trap cleanup EXIT

# As long as launch.sh may take itself (its phases, WS_START_TIMEOUT_S each, 120 s by
# default): it exits when one of them times out, which ends this wait too.
for _ in $(seq $(((4 * ${WS_START_TIMEOUT_S:-120} + 30) * 5))); do
  [[ -f "$READY" ]] && break
  kill -0 "$LAUNCH_PID" 2>/dev/null || { echo "[quickstart] launch failed" >&2; exit 1; }
  sleep 0.2
done
[[ -f "$READY" ]] || { echo "[quickstart] the trio did not come up" >&2; exit 1; }
# shellcheck disable=SC1090
source "$READY"

echo
echo "== health (coordinator, gpu_worker, cpu_worker)"
"$BIN/wscope" health "$WS_TARGET" "$WS_GPU_WORKER" "$WS_CPU_WORKER"
echo
echo "== server info"
"$BIN/wscope" info --target="$WS_TARGET"
echo
echo "== self test: data plane, and KV written by the gpu_worker, read in place by the cpu_worker"
"$BIN/wscope" selftest --target="$WS_TARGET"
echo
# A 600-token prompt (the fixture's first): prefill crosses KV blocks and the D-window.
PROMPT="$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompts"][0]["token_ids"])))' \
  "$ROOT/tests/fixtures/qwen3_moe/expected.json")"
echo "== generate: a 600-token prompt, 48 new tokens streamed (temperature 0.8, seed 7)"
"$BIN/wscope" generate --target="$WS_TARGET" --prompt_ids="$PROMPT" --max_tokens=48 \
  --temperature=0.8 --seed=7 --ignore_eos
echo
# Where the generation's time went, per process and phase (issue 8's spans), and the
# Chrome trace of the three processes on one timeline.
TRACE="$WS_LOG_DIR/quickstart-trace.json"  # beside the trio's logs, kept after it stops
echo "== profile: the generation's last 16 steps, per process and phase"
"$BIN/wscope" profile --target="$WS_TARGET" --steps=16 --out="$TRACE"
echo
echo "== server info after the generation"
"$BIN/wscope" info --target="$WS_TARGET"
echo
echo "== stopping"
cleanup
trap - EXIT
for segment in "$WS_ARENA" "$WS_ARENA-synthetic-experts"; do
  if [[ -e "/dev/shm$segment" ]]; then
    echo "[quickstart] $segment was left in /dev/shm" >&2
    exit 1
  fi
done
# The coordinator carries the arena's name on its command line, the workers their port
# files in the launch's log folder.
left=$( (pgrep -f -- "$WS_ARENA"; pgrep -f -- "--port_file=$WS_LOG_DIR/") || true)
if [[ -n $left ]]; then
  echo "[quickstart] processes left running: $(echo $left)" >&2
  exit 1
fi
echo "[quickstart] stopped cleanly: no process and no /dev/shm segment left"
