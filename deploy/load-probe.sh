#!/usr/bin/env bash
# Issue 5's loading measurement: one trio on synthetic weights of ARCH with LAYERS layers;
# prints the time from launch to serving, each process's resident memory (VmRSS, and how
# much of it is shared memory: the synthetic experts' segment, the KV arena), the workers'
# load lines from their logs, the GPU memory in use and `wscope info`; then stops the trio.
#
#   deploy/load-probe.sh [--arch qwen3_moe] [--layers 48] [--region-mib 1024] [--bin DIR]
#       [--device cuda|host] [-- COORDINATOR_FLAGS...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH=qwen3_moe LAYERS=48 REGION_MIB=1024 BIN="${WS_BIN:-$ROOT/build/bin}" DEVICE=cuda EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --region-mib) REGION_MIB="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "load-probe.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# shellcheck source=deploy/bench-trio.sh
source "$ROOT/deploy/bench-trio.sh"
kv_bytes_of "$ARCH" >/dev/null
start=$(date +%s.%N)
start_trio load-probe writescope "$REGION_MIB" ${EXTRA[@]+"${EXTRA[@]}"}
ready=$(date +%s.%N)
echo "load-probe: $ARCH, $LAYERS layers: serving after $(awk -v a="$start" -v b="$ready" 'BEGIN { printf "%.1f", b - a }') s"
for name in coordinator gpu_worker cpu_worker; do
  pid=$(pgrep -n -x "$name" || true)
  [[ -n $pid ]] || { echo "  $name: not found"; continue; }
  awk -v n="$name" '/^VmRSS|^RssAnon|^RssFile|^RssShmem|^VmHWM/ {printf "  %-12s %-9s %8.2f GiB\n", n, $1, $2 / 1048576}' \
    "/proc/$pid/status"
done
grep -h "weights of\|routed experts\|done 100%\|GPU matrix products\|KV cache on\|prepack\|shared" "$WS_LOG_DIR"/*.log 2>/dev/null | head -12 || true
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader | sed 's/^/  GPU memory used, total: /'
fi
df -h /dev/shm | tail -1 | sed 's/^/  \/dev\/shm: /'
"$BIN/wscope" info --target="$WS_TARGET" | head -30 || true
stop_trio
