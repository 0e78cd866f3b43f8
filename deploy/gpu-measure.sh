#!/usr/bin/env bash
# One call on the GPU machine: every measurement the issues ask for that needs it, from
# the bundle deploy/gpu-bundle.sh built (carry dist/writescope-gpu.tar.xz). Results go to
# $OUT (at most 8 files come back): measure.log has everything, in order.
#
#   deploy/gpu-measure.sh [STEP...]   steps: probe tests attention kv channel experts load
#                                     e2e generate generate-kernels trio trio-generate
#                                     trio-generate-mla
#                                     prefill-long bench-grid contention prefill-placement
#                                     fixtures decode decode-old ncu-decode
#                                     (default: probe tests attention kv channel experts load
#                                     e2e trio, in order)
#
# decode: the GPU decode tables alone (attention_bench --no-cpu --no-prefill --no-overlap:
#   the batch-1 anatomy, GQA and MLA with their split-size sweeps, the merges) at
#   WS_DECODE_TOKENS (8192,32768,131072) x WS_DECODE_BATCHES (1,4,8,32).
# decode-old: the same tables from a second bundle, WS_OLD_BUNDLE (a tarball carried beside
#   the first, e.g. dist/old.tar.gz built from another commit), unpacked to /tmp/ws-old: an
#   A/B of two builds on one lease. WS_OLD_BUNDLE_TABLES=all for a build that predates
#   --no-prefill and --no-overlap (it then runs those tables too). Or, smaller to carry,
#   WS_OLD_BINARY: another build's attention_bench alone, gzipped (e.g. dist/old-bench.gz),
#   run with the first bundle's libraries (for builds whose libraries are the same).
# ncu-decode: Nsight Compute (every section, clocks left alone) of the GQA (Qwen3) and MLA
#   decode kernels and their split merges at 32K x 1, summarized (deploy/ncu_summary.py)
#   into $OUT/ncu-gqa.txt, ncu-mla.txt; the decode kernels' SASS into $OUT/sass-decode.txt.
#
# Each step has its own time limit so that one slow step cannot eat the call.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-/tmp/ws-out}"
mkdir -p "$OUT"
LOG="$OUT/measure.log"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(probe tests attention kv channel experts load e2e trio)

run_step() {  # run_step NAME LIMIT_S COMMAND...
  local name="$1" limit="$2"; shift 2
  echo "===== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local code=${PIPESTATUS[0]}
  echo "===== $name: exit $code after $((SECONDS - start))s" | tee -a "$LOG"
}

nvidia-smi 2>&1 | tee -a "$LOG"
nproc | sed 's/^/cores: /' | tee -a "$LOG"
for step in "${steps[@]}"; do
  case "$step" in
    probe)
      run_step probe 150 deploy/gpu-run.sh ws_probe --json="$OUT/probe.json" ;;
    tests)
      run_step tests 240 deploy/gpu-run.sh --all-tests ;;
    attention)
      run_step attention 240 deploy/gpu-run.sh attention_bench --threads="$(nproc)" --iters=3 ;;
    kv)
      run_step kv 150 deploy/gpu-run.sh kv_transfer_bench --device=cuda ;;
    channel)
      run_step channel 90 deploy/gpu-run.sh channel_bench ;;
    experts)
      run_step experts 240 deploy/gpu-run.sh cpu_experts_bench ;;
    load)
      # A synthetic Qwen3-30B-A3B, all 48 layers, each worker's side.
      run_step load-gpu-side 120 deploy/gpu-run.sh model_load_bench --synthetic=qwen3_moe --side=gpu
      run_step load-cpu-side 200 deploy/gpu-run.sh model_load_bench --synthetic=qwen3_moe --side=cpu ;;
    e2e)
      # The real trio on the CUDA device: launch, health, selftest (KV paths), kills.
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      run_step e2e-cuda 240 env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" WS_E2E_DEVICE=cuda \
        tests/e2e/launch_test.sh "$PWD" /tmp/ws/bin ;;
    generate)
      # Generation through the trio on the CUDA device against the single-process forward
      # and transformers (the CI test, with the GPU worker on CUDA).
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      run_step generate-cuda 300 env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" \
        WS_E2E_DEVICE=cuda python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin ;;
    generate-kernels)
      # The service on the register kernel and the bulk ones (gpu_worker --gqa_decode_kernel):
      # a synthetic Qwen3-30B-A3B of 4 layers, an 8192-token prompt, 32 greedy tokens under
      # transfer-all, compared token by token (deploy/generate-kernels.sh).
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      run_step generate-kernels 300 env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" \
        deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda --out "$OUT/generate-kernels" ;;
    trio-generate)
      # A synthetic Qwen3-30B-A3B of 4 layers (real shapes) on the CUDA device: a 2048-token
      # prompt, 64 decoded tokens, the timing summary.
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      run_step trio-generate 300 env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" \
        bash -c 'set -e; r=$(mktemp -u); WS_BIN=/tmp/ws/bin deploy/launch.sh --listen 127.0.0.1:0 \
          --ready-file "$r" --device cuda -- --synthetic=qwen3_moe --num_layers=4 \
          --cpu_region_mib=4096 --transfer_region_mib=4096 --channel_mib=64 & p=$!
          for i in $(seq 600); do [[ -f $r ]] && break; sleep 0.2; done; source "$r"
          ids=$(python3 -c "import random; random.seed(1); print(\",\".join(str(random.randrange(151936)) for _ in range(2048)))")
          for policy_run in 1 2; do
            /tmp/ws/bin/wscope generate --target=$WS_TARGET --prompt_ids=$ids --max_tokens=64 --ignore_eos | tail -3
          done
          /tmp/ws/bin/wscope info --target=$WS_TARGET
          /tmp/ws/bin/wscope profile --target=$WS_TARGET --steps=4 --out=$OUT/trio-trace.json
          kill -TERM $p; wait $p' ;;
    prefill-long)
      # Long prefill, synthetic Qwen3-30B-A3B of WS_PREFILL_LAYERS (default 8) layers (real
      # shapes): a 32768-token prompt with the expert placement rule (auto: long chunks run
      # their routed experts on the GPU, streaming the weights), then 8192 tokens with the
      # routed experts forced on the CPU and on the GPU, in chunks of up to 4096 tokens.
      # WS_PREFILL_MODES picks the runs (default "auto cpu gpu").
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      run_step prefill-long 560 env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" \
        bash -c 'set -e; layers=${WS_PREFILL_LAYERS:-8}
          python3 -c "import random; random.seed(3); print(\" \".join(str(random.randrange(151936)) for _ in range(32768)))" > /tmp/p32k
          python3 -c "import random; random.seed(4); print(\" \".join(str(random.randrange(151936)) for _ in range(8192)))" > /tmp/p8k
          for mode in ${WS_PREFILL_MODES:-auto cpu gpu}; do
            r=$(mktemp -u); WS_BIN=/tmp/ws/bin deploy/launch.sh --listen 127.0.0.1:0 \
              --ready-file "$r" --device cuda -- --synthetic=qwen3_moe --num_layers=$layers \
              --cpu_region_mib=2048 --transfer_region_mib=2048 --channel_mib=96 \
              --max_step_tokens=4096 --routed_experts=$mode & p=$!
            for i in $(seq 900); do [[ -f $r ]] && break; sleep 0.2; done; source "$r"
            echo "== routed_experts=$mode, $layers layers"
            grep -h "routed experts\|streamable" $WS_LOG_DIR/*.log | head -4 || true
            if [[ $mode == auto ]]; then
              /tmp/ws/bin/wscope generate --target=$WS_TARGET --prompt_file=/tmp/p32k --max_tokens=8 --ignore_eos | tail -3
              /tmp/ws/bin/wscope profile --target=$WS_TARGET --steps=10 --out=$OUT/prefill-32k-trace.json | tail -40
            fi
            /tmp/ws/bin/wscope generate --target=$WS_TARGET --prompt_file=/tmp/p8k --max_tokens=8 --ignore_eos | tail -3
            /tmp/ws/bin/wscope profile --target=$WS_TARGET --steps=10 --out=$OUT/prefill-8k-$mode-trace.json | tail -25
            kill -TERM $p; wait $p || true
          done' ;;
    bench-grid)
      # Issue 7: steady-state decode at fixed contexts under each policy (deploy/bench-grid.sh)
      # for each shape of WS_BENCH_ARCHS (qwen3_moe), WS_BENCH_LAYERS (4) layers, policies
      # WS_BENCH_POLICIES, batches WS_BENCH_BATCHES (4,16,32), contexts WS_BENCH_CONTEXTS
      # (2048,8192,16384,32768), WS_BENCH_STEPS (16) measured after WS_BENCH_WARMUP (16),
      # WS_BENCH_REPEATS (1) rounds of the policies, hot experts WS_BENCH_HOT (auto: on),
      # extra worker flags WS_CPU_WORKER_FLAGS (e.g. --mla_matmul=off) and WS_GPU_WORKER_FLAGS
      # (e.g. --prefetch_next_step=false; deploy/bench-trio.sh);
      # $OUT/bench-ARCH.csv and $OUT/steps-ARCH.csv. Limit WS_BENCH_LIMIT_S (560): one repeat
      # of Mixtral's 6 points took 210 s with 16 + 16 steps (run 65); more points need more.
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      for arch in ${WS_BENCH_ARCHS:-qwen3_moe}; do
        run_step "bench-grid $arch" "${WS_BENCH_LIMIT_S:-560}" \
          env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" WS_BIN=/tmp/ws/bin \
          deploy/bench-grid.sh --arch "$arch" --layers "${WS_BENCH_LAYERS:-4}" \
          --policies "${WS_BENCH_POLICIES:-writescope transfer-all cpu-all static:0.5 monolithic}" \
          --batches "${WS_BENCH_BATCHES:-4,16,32}" --contexts "${WS_BENCH_CONTEXTS:-2048,8192,16384,32768}" \
          --steps "${WS_BENCH_STEPS:-16}" --warmup "${WS_BENCH_WARMUP:-16}" \
          --repeats "${WS_BENCH_REPEATS:-1}" --hot-experts "${WS_BENCH_HOT:-auto}" --out "$OUT"
      done ;;
    prefill-placement)
      # Issue 7: prefill time per policy (write-time placement against one region);
      # WS_PREFILL_PLACEMENT_ARGS are passed on. $OUT/prefill-placement.csv.
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      # shellcheck disable=SC2086
      run_step prefill-placement "${WS_PREFILL_PLACEMENT_LIMIT_S:-300}" \
        env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" WS_BIN=/tmp/ws/bin \
        deploy/prefill-placement.sh --out "$OUT" ${WS_PREFILL_PLACEMENT_ARGS:-} ;;
    contention)
      # Issue 7: a competing CPU + DRAM load mid-run (deploy/contention.sh); WS_CONTENTION_ARGS
      # are passed on. $OUT/contention-*.csv.
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      # shellcheck disable=SC2086
      run_step contention "${WS_CONTENTION_LIMIT_S:-400}" \
        env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" WS_BIN=/tmp/ws/bin \
        deploy/contention.sh --out "$OUT" ${WS_CONTENTION_ARGS:-} ;;
    trio-generate-mla)
      # DeepSeek-V2-Lite real shapes, 3 synthetic layers (dense first layer + 2 MoE) on the
      # CUDA device: MLA attention on the GPU kernels, a 1024-token prompt, 32 new tokens.
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      run_step trio-generate-mla 300 env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" \
        bash -c 'set -e; r=$(mktemp -u); WS_BIN=/tmp/ws/bin deploy/launch.sh --listen 127.0.0.1:0 \
          --ready-file "$r" --device cuda -- --synthetic=deepseek_v2 --num_layers=3 \
          --cpu_region_mib=2048 --transfer_region_mib=2048 --channel_mib=64 & p=$!
          for i in $(seq 600); do [[ -f $r ]] && break; sleep 0.2; done; source "$r"
          ids=$(python3 -c "import random; random.seed(2); print(\",\".join(str(random.randrange(102400)) for _ in range(1024)))")
          for run in 1 2; do
            /tmp/ws/bin/wscope generate --target=$WS_TARGET --prompt_ids=$ids --max_tokens=32 --ignore_eos | tail -2
          done
          /tmp/ws/bin/wscope profile --target=$WS_TARGET --steps=4 --out=$OUT/trio-mla-trace.json | tail -30
          grep -h "WARN\|fall" $WS_LOG_DIR/gpu_worker.log | head -5 || true
          kill -TERM $p; wait $p' ;;
    trio)
      # The trio on the CUDA device with a synthetic Qwen3-30B-A3B of 4 layers (real
      # shapes), 4 GiB per host region: info, then the KV self test.
      deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
      run_step trio-synthetic 300 env LD_LIBRARY_PATH="/tmp/ws/lib:/usr/local/cuda/lib64" \
        bash -c 'set -e; r=$(mktemp -u); WS_BIN=/tmp/ws/bin deploy/launch.sh --listen 127.0.0.1:0 \
          --ready-file "$r" --device cuda -- --synthetic=qwen3_moe --num_layers=4 \
          --cpu_region_mib=4096 --transfer_region_mib=4096 & p=$!
          for i in $(seq 600); do [[ -f $r ]] && break; sleep 0.2; done; source "$r"
          /tmp/ws/bin/wscope info --target=$WS_TARGET; /tmp/ws/bin/wscope selftest --target=$WS_TARGET
          kill -TERM $p; wait $p; grep -h "weights of\|KV cache on" $WS_LOG_DIR/*.log' ;;
    decode|decode-old)
      decode_args=(--no-cpu --iters=5 --tokens="${WS_DECODE_TOKENS:-8192,32768,131072}"
                   --batch="${WS_DECODE_BATCHES:-1,4,8,32}")
      decode_only=(--no-prefill --no-overlap)
      if [[ $step == decode ]]; then
        run_step decode 300 deploy/gpu-run.sh attention_bench "${decode_args[@]}" "${decode_only[@]}"
      elif [[ -f ${WS_OLD_BINARY:-} ]]; then
        deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
        mkdir -p /tmp/ws-old-bin
        gunzip -c "$WS_OLD_BINARY" >/tmp/ws-old-bin/attention_bench
        chmod +x /tmp/ws-old-bin/attention_bench
        run_step decode-old 300 /tmp/ws/run.sh /tmp/ws-old-bin/attention_bench \
          "${decode_args[@]}" "${decode_only[@]}"
      elif [[ -f ${WS_OLD_BUNDLE:-} ]]; then
        # A build before --no-prefill and --no-overlap (session 25) refuses them: it runs
        # those tables too.
        [[ ${WS_OLD_BUNDLE_TABLES:-} == all ]] && decode_only=()
        run_step decode-old 300 env WS_BUNDLE="$WS_OLD_BUNDLE" WS_BUNDLE_DIR=/tmp/ws-old \
          deploy/gpu-run.sh attention_bench "${decode_args[@]}" ${decode_only[@]+"${decode_only[@]}"}
      else
        echo "decode-old: neither WS_OLD_BINARY nor WS_OLD_BUNDLE names a file: skipped" | tee -a "$LOG"
      fi ;;
    ncu-decode)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
      if [[ -z $ncu ]]; then
        echo "ncu-decode: no ncu on this machine: skipped" | tee -a "$LOG"
      else
        deploy/gpu-run.sh --unpack-only >/dev/null 2>&1 || true
        # ncu_decode NAME KERNEL BENCH_FLAGS...: one decode kernel and its merge at 32K x 1.
        # The first decode call of each table is a warm-up; launches alternate decode,
        # merge: skip two pairs, profile the third.
        ncu_decode() {
          local name=$1 kernel=$2
          shift 2
          run_step "ncu-$name" 180 "$ncu" --clock-control none --set full \
            -k "regex:$kernel|MergeSplitsVec" --launch-skip 4 --launch-count 2 \
            -o "/tmp/ncu-$name" /tmp/ws/run.sh attention_bench --no-cpu --no-prefill \
            --no-overlap --no-merge --tokens=32768 --batch=1 --iters=1 "$@"
          "$ncu" --import "/tmp/ncu-$name.ncu-rep" --print-details all >"/tmp/ncu-$name.txt" 2>&1 || true
          python3 deploy/ncu_summary.py "/tmp/ncu-$name.txt" >"$OUT/ncu-$name.txt" || true
        }
        ncu_decode gqa GqaDecodeTc --no-mla --models=qwen3
        ncu_decode mla MlaDecodeTc --no-gqa
        # The decode kernels' machine code (cuobjdump ships with the toolkit there).
        cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
        "$cuobjdump" -sass /tmp/ws/bin/attention_bench 2>/dev/null |
          awk '/Function : /{keep = /DecodeTcKernel/} keep' >"$OUT/sass-decode.txt" || true
      fi ;;
    fixtures)
      run_step fixtures 300 python3 deploy/make_fixtures.py --out /tmp/fixtures
      if [[ -d /tmp/fixtures ]]; then
        tar -czf "$OUT/fixtures.tar.gz" -C /tmp fixtures && ls -la "$OUT/fixtures.tar.gz" | tee -a "$LOG"
      fi ;;
    *) echo "unknown step $step" | tee -a "$LOG" ;;
  esac
done
