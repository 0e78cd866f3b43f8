#!/usr/bin/env bash
# The service on each GQA decode kernel of the CUDA device (gpu_worker --gqa_decode_kernel):
# one trio per kernel on a synthetic model of real shapes (the test fixtures' head_dim 16 never
# reaches the tensor-core kernels), the same prompt, greedy tokens with their log-probabilities
# under transfer-all (every spilled block attended on the GPU), each kernel's generation
# compared with the first's (deploy/compare_generations.py).
#
#   deploy/generate-kernels.sh [--bin DIR] [--device cuda|host] [--arch qwen3_moe|mixtral]
#       [--layers N] [--prompt N] [--tokens N] [--out DIR] [KERNEL...]
#
# KERNELs: default, registers, bulk4, bulk3x2 (default: registers bulk4 bulk3x2; the first is
# the reference). --device host runs the CPU kernels whatever the flag says (a check of this
# script, not of the kernels). Writes DIR/gen-KERNEL.json and prints each comparison; exit 1 if
# a generation fails or differs, 2 for bad arguments.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${WS_BIN:-$ROOT/build/bin}" DEVICE=cuda ARCH=qwen3_moe LAYERS=4 PROMPT=8192 TOKENS=32
OUT_DIR="${OUT:-/tmp/ws-out}"
kernels=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --prompt) PROMPT="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "generate-kernels: unknown flag $1" >&2; exit 2 ;;
    *) kernels+=("$1"); shift ;;
  esac
done
[[ ${#kernels[@]} -eq 0 ]] && kernels=(registers bulk4 bulk3x2)
for k in "${kernels[@]}"; do
  case "$k" in default|registers|bulk4|bulk3x2) ;;
    *) echo "generate-kernels: unknown kernel '$k' (default, registers, bulk4 or bulk3x2)" >&2
       exit 2 ;;
  esac
done
case "$ARCH" in qwen3_moe|mixtral) ;;
  *) echo "generate-kernels: --arch must be qwen3_moe or mixtral (the GQA shapes)" >&2; exit 2 ;;
esac
for n in "$LAYERS" "$PROMPT" "$TOKENS"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "generate-kernels: --layers, --prompt and --tokens take positive integers" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
vocab=$([[ $ARCH == qwen3_moe ]] && echo 151936 || echo 32000)
ids=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange($vocab)) for _ in range($PROMPT)))")
region_mib=$(( (PROMPT + TOKENS) * LAYERS * 4096 / 1048576 + 256 ))

status=0
for k in "${kernels[@]}"; do
  ready=$(mktemp -u /tmp/ws-gk-ready.XXXXXX)
  SECONDS=0
  WS_BIN="$BIN" "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 --ready-file "$ready" \
    --device "$DEVICE" --gpu-worker-flag "--gqa_decode_kernel=$k" -- --synthetic="$ARCH" \
    --num_layers="$LAYERS" --policy=transfer-all --cpu_region_mib=256 \
    --transfer_region_mib="$region_mib" --channel_mib=64 > "$OUT_DIR/launch-$k.log" 2>&1 &
  pid=$!
  for _ in $(seq 1500); do [[ -f $ready ]] && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
  if [[ ! -f $ready ]]; then
    echo "$k: the trio did not start (launch log: $OUT_DIR/launch-$k.log)"; tail -5 "$OUT_DIR/launch-$k.log"
    kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; status=1; continue
  fi
  source "$ready"; rm -f "$ready"
  grep -h "GQA decode kernel" "$WS_LOG_DIR"/gpu_worker*.log 2>/dev/null | head -1 | sed "s/^/$k: /"
  "$BIN/wscope" generate --target="$WS_TARGET" --prompt_ids="$ids" --max_tokens="$TOKENS" \
    --ignore_eos --logprobs=2 --json > "$OUT_DIR/gen-$k.json" 2> "$OUT_DIR/gen-$k.err"
  rc=$?
  kill -TERM $pid; wait $pid 2>/dev/null
  echo "$k: generate exit $rc after ${SECONDS}s (trio start and generation)"
  if [[ $rc -ne 0 ]]; then cat "$OUT_DIR/gen-$k.err" "$OUT_DIR/gen-$k.json" | head -5; status=1; fi
done
reference="${kernels[0]}"
for k in "${kernels[@]:1}"; do
  [[ -s $OUT_DIR/gen-$reference.json && -s $OUT_DIR/gen-$k.json ]] || continue
  echo "== $k against $reference"
  python3 "$ROOT/deploy/compare_generations.py" "$OUT_DIR/gen-$reference.json" "$OUT_DIR/gen-$k.json" || status=1
done
exit $status
