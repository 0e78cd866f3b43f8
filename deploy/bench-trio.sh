# Sourced by the benchmark scripts (bench-grid.sh, contention.sh, profile-bench.sh,
# prefill-placement.sh): one trio per policy on synthetic weights, stopped whatever ends
# the script (an error, Ctrl-C: launch.sh runs in the background there, where SIGINT does
# not reach it).
#
#   kv_bytes_of ARCH                   KV bytes per token and layer (exit 2 for another arch)
#   start_trio WHO POLICY REGION_MIB [COORDINATOR_FLAGS...]
#                                      launches ARCH/LAYERS (the caller's variables) on
#                                      DEVICE from BIN with both host regions of REGION_MIB;
#                                      sources the ready file (WS_TARGET, ...); exit 1 with
#                                      "WHO: ..." when it does not start
#   stop_trio                          stops the current trio (also on EXIT, INT, TERM)
#
# HOT_EXPERTS (auto: on with CUDA; on; off) is the gpu_worker's --hot_experts. The bench
# trios choose the set after 1 routed token (HOT_WARMUP_TOKENS): a bench's KV is placed, not
# computed, so no prompt is routed, and synthetic routing is near uniform anyway. A model
# shrunk to fewer layers gets the full model's room per MoE layer (gpu_worker.cc).
# WS_CPU_WORKER_FLAGS (environment, space-separated) are passed to every cpu_worker, e.g.
# WS_CPU_WORKER_FLAGS=--mla_matmul=off for DeepSeek's MLA on the vector kernels where the
# CPU has AMX (the default there is our AMX kernel); WS_GPU_WORKER_FLAGS likewise to
# every gpu_worker (e.g. --prefetch_next_step=false).
HOT_EXPERTS="${HOT_EXPERTS:-auto}" HOT_WARMUP_TOKENS="${HOT_WARMUP_TOKENS:-1}"

kv_bytes_of() {
  case "$1" in
    qwen3_moe) echo 2048 ;;    # 4 KV heads x 128 x (K, V) x bf16
    mixtral) echo 4096 ;;      # 8 KV heads
    deepseek_v2) echo 1152 ;;  # MLA: 512 + 64 latent values
    *) echo "--arch must be qwen3_moe, mixtral or deepseek_v2, not '$1'" >&2; exit 2 ;;
  esac
}

# The largest of a comma-separated list of numbers.
max_of() { tr ',' '\n' <<<"$1" | sort -n | tail -1; }

launcher=""
stop_trio() {
  if [[ -n $launcher ]]; then
    # The gpu_worker's hot-expert sizing and choice, for the log.
    grep -h "hot experts:" "${WS_LOG_DIR:-/nonexistent}"/gpu_worker*.log 2>/dev/null |
      sed 's/^.*\] /  gpu_worker: /' | tail -3 || true
    kill -TERM "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
    # Written as the gpu_worker stops: how often the next step's first round went early.
    grep -h "early rounds" "${WS_LOG_DIR:-/nonexistent}"/gpu_worker*.log 2>/dev/null |
      sed 's/^.*\] /  gpu_worker: /' | tail -1 || true
    launcher=""
  fi
}
trap stop_trio EXIT
trap 'stop_trio; exit 130' INT TERM

start_trio() {
  local who="$1" policy="$2" region_mib="$3"
  shift 3
  local ready
  ready=$(mktemp -u)
  # WS_CPU_WORKER_FLAGS: extra cpu_worker flags, space-separated (e.g. --mla_matmul=off).
  local worker_flags=() flag
  for flag in ${WS_CPU_WORKER_FLAGS:-}; do worker_flags+=(--cpu-worker-flag "$flag"); done
  for flag in ${WS_GPU_WORKER_FLAGS:-}; do worker_flags+=(--gpu-worker-flag "$flag"); done
  # WS_COORDINATOR_FLAGS: extra coordinator flags, space-separated (e.g. --rest_shift_explore=0).
  local coordinator_flags=()
  for flag in ${WS_COORDINATOR_FLAGS:-}; do coordinator_flags+=("$flag"); done
  WS_BIN="$BIN" "$ROOT/deploy/launch.sh" --listen 127.0.0.1:0 --bin "$BIN" --ready-file "$ready" \
    --device "$DEVICE" ${worker_flags[@]+"${worker_flags[@]}"} --gpu-worker-flag --hot_experts="$HOT_EXPERTS" \
    --gpu-worker-flag --hot_experts_warmup_tokens="$HOT_WARMUP_TOKENS" \
    -- --synthetic="$ARCH" --num_layers="$LAYERS" \
    --cpu_region_mib="$region_mib" --transfer_region_mib="$region_mib" --policy="$policy" "$@" \
    ${coordinator_flags[@]+"${coordinator_flags[@]}"} &
  launcher=$!
  for _ in $(seq 1500); do
    [[ -f $ready ]] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.2
  done
  if [[ ! -f $ready ]]; then
    echo "$who: the trio for $policy did not start" >&2
    exit 1
  fi
  # shellcheck disable=SC1090
  source "$ready"
  # The scheduler's start-up calibrations of the two paths (before serving) and what the
  # CPU kernels run on, for the log.
  local pattern
  for pattern in "GPU path calibrated" "CPU path calibrated" "CPU attention kernels"; do
    grep -h "$pattern" "${WS_LOG_DIR:-/nonexistent}"/*.log 2>/dev/null | tail -1 |
      sed "s/^.*\] /$who: $policy: /" || true
  done
}
