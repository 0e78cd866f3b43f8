#!/usr/bin/env bash
# Issue 7's prefill check: write-time placement must cost prefill nothing. Per policy, one
# trio on synthetic weights; a prompt of --tokens random ids prefilled --runs times (one new
# token each, so the time is the prefill's; one unrecorded prefill first); the policies place the prompt's KV blocks
# differently (writescope at the scheduler's target, transfer-all and cpu-all all in one
# region, static:R at R). Appends policy,layers,prompt_tokens,run,prefill_ms,tokens_per_s to
# OUT/prefill-placement.csv.
#
#   deploy/prefill-placement.sh [--arch qwen3_moe] [--layers 4] [--tokens 8192] [--runs 3]
#       [--policies "writescope transfer-all cpu-all static:0.5"] [--out DIR] [--bin DIR]
#       [--device cuda|host]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH=qwen3_moe LAYERS=4 TOKENS=8192 RUNS=3 POLICIES="writescope transfer-all cpu-all static:0.5"
OUT_DIR="${OUT:-.}" BIN="${WS_BIN:-$ROOT/build/bin}" DEVICE=cuda
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --policies) POLICIES="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "prefill-placement.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# shellcheck source=deploy/bench-trio.sh
source "$ROOT/deploy/bench-trio.sh"
kv_bytes=$(kv_bytes_of "$ARCH")
case "$ARCH" in  # the prompt's token ids stay below the vocabulary
  qwen3_moe) vocab=151936 ;; mixtral) vocab=32000 ;; deepseek_v2) vocab=102400 ;;
esac
# Every run's prompt is live at most once at a time; one prompt fits either region whole.
region_mib=$((((TOKENS + 512) * kv_bytes * LAYERS >> 20) * 11 / 10 + 64))
mkdir -p "$OUT_DIR"
csv="$OUT_DIR/prefill-placement.csv"
[[ -f $csv ]] || echo "policy,layers,prompt_tokens,run,prefill_ms,tokens_per_s" >"$csv"
prompt="$(mktemp)"
trap 'stop_trio; rm -f "$prompt"' EXIT
python3 -c "import random; random.seed(5); print(' '.join(str(random.randrange($vocab)) for _ in range($TOKENS)))" >"$prompt"
for policy in $POLICIES; do
  start_trio prefill-placement "$policy" "$region_mib"
  # One unrecorded prefill first: the first one pays one-time costs (allocations, pinning).
  "$BIN/wscope" generate --target="$WS_TARGET" --prompt_file="$prompt" --max_tokens=1 \
    --ignore_eos --json >/dev/null || true
  for run in $(seq "$RUNS"); do
    json=$("$BIN/wscope" generate --target="$WS_TARGET" --prompt_file="$prompt" --max_tokens=1 \
      --ignore_eos --json) || { echo "prefill-placement: $policy run $run failed: $json" >&2; continue; }
    ms=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['timings']['prefill_ms'])" \
      "$json") || { echo "prefill-placement: $policy run $run: no timings in $json" >&2; continue; }
    rate=$(python3 -c "print(f'{$TOKENS / max($ms, 1e-9) * 1e3:.1f}')")
    echo "$policy,$LAYERS,$TOKENS,$run,$ms,$rate" | tee -a "$csv"
  done
  stop_trio
done
rm -f "$prompt"
echo "prefill-placement: $csv"
