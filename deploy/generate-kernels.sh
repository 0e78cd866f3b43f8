#!/usr/bin/env bash
# The service on each GQA decode kernel of the CUDA device (gpu_worker --gqa_decode_kernel):
# one trio per kernel on a synthetic model of real shapes (the test fixtures' head_dim 16 never
# reaches the tensor-core kernels), the same prompt, greedy tokens with their log-probabilities
# under transfer-all (every spilled block attended on the GPU), each kernel's generation
# compared with the first's (deploy/compare_generations.py).
#
# The trios keep the routed experts on the cpu_worker (--stream_experts=off, hot experts off;
# WS_GPU_WORKER_FLAGS and HOT_EXPERTS override): the coordinator otherwise picks their processor
# per step from its timings, and two trios of one kernel part at near ties. Then only the
# kernels' rounding differs, which a MoE router near a tie can still turn into one token's jump;
# a FAIL asks for cuda_attention_test (the fp64 reference). docs/measurements.md, session 56.
#
#   deploy/generate-kernels.sh [--bin DIR] [--device cuda|host] [--arch qwen3_moe|mixtral]
#       [--layers N] [--prompt N] [--tokens N] [--out DIR] [KERNEL...]
#
# KERNELs: default, registers, bulk4, bulk3x2 (default: registers bulk4 bulk3x2; the first is
# the reference). --device host runs the CPU kernels whatever the flag says (a check of this
# script, not of the kernels). Writes DIR/gen-KERNEL.json and prints each comparison; exit 1 if
# a trio does not start (launch-KERNEL.log says why) or a generation fails or differs, 2 for bad
# arguments.
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
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "${BASH_SOURCE[0]}"; exit 0 ;;
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
# The trio's launch and stop (also on an error, Ctrl-C or a timeout's TERM) and the KV bytes
# per token: deploy/bench-trio.sh. Hot experts off (above); where HOT_EXPERTS turns them on,
# chosen as the gpu_worker would alone (4096 routed tokens, within the prompt).
HOT_WARMUP_TOKENS=4096 HOT_EXPERTS="${HOT_EXPERTS:-off}"
# shellcheck source=bench-trio.sh
source "$ROOT/deploy/bench-trio.sh"
vocab=$([[ $ARCH == qwen3_moe ]] && echo 151936 || echo 32000)
# The ids go in a file: a 32K prompt's ids on the command line pass the kernel's limit on one
# argument (128 KiB; run 262 failed so).
prompt_file="$OUT_DIR/prompt-ids.txt"
python3 -c "import random; random.seed(7); print(','.join(str(random.randrange($vocab)) for _ in range($PROMPT)))" > "$prompt_file"
region_mib=$(( (PROMPT + TOKENS) * LAYERS * $(kv_bytes_of "$ARCH") / 1048576 + 256 ))

status=0
base_gpu_flags="--stream_experts=off ${WS_GPU_WORKER_FLAGS:-}"  # a later flag wins
for k in "${kernels[@]}"; do
  SECONDS=0
  WS_GPU_WORKER_FLAGS="$base_gpu_flags --gqa_decode_kernel=$k" \
    start_trio "$k" transfer-all "$region_mib" --channel_mib=64 > "$OUT_DIR/launch-$k.log" 2>&1
  grep -h "GQA decode kernel" "$WS_LOG_DIR"/gpu_worker*.log 2>/dev/null | head -1 | sed "s/^/$k: /"
  "$BIN/wscope" generate --target="$WS_TARGET" --prompt_file="$prompt_file" --max_tokens="$TOKENS" \
    --ignore_eos --logprobs=2 --json > "$OUT_DIR/gen-$k.json" 2> "$OUT_DIR/gen-$k.err"
  rc=$?
  stop_trio >> "$OUT_DIR/launch-$k.log" 2>&1
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
