# Run 256 (session 52): --charge_exploration_overrun once an exploration that cost less than it
# paid repays the debt (runs 254-255 measured the debt taking positive overruns only), A/B
# against false (an exploration charged its prediction, as before), and the CUDA e2e:
# 1. The CUDA e2e on the session's code.
# 2. DeepSeek 4 and 16 x 8K, writescope / transfer-all / monolithic in one runtime, 3 rounds x
#    10 turns of 8 steps, six arms in the order on, off, off, on, on, off.
# 3. Qwen3 4 x 8K, arms on, off, off, on, as time allows.
# 4. Contention, Qwen3 16 x 32K, writescope alone, the charge on: an 8-thread load on 10 s,
#    off 10 s, 3 times (only while the call has room).
# Each trio read by best_baseline_report.py (where writescope's time went) and modes_report.py
# (what the explorations paid and spent); pooled per arm at the end.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
WS_E2E_DEVICE=cuda timeout 200 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
mkdir -p /tmp/g256
trio() {  # NAME ARCH SPEC BATCHES
  local run=$1 arch=$2 spec=$3 batches=$4 flags=""
  [[ $(($(date +%s) - CALL_START)) -gt 470 ]] && { echo "$run skipped (time)"; return; }
  [[ $run == *off* ]] && flags="--charge_exploration_overrun=false"
  SECONDS=0; WS_COORDINATOR_FLAGS="$flags" deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g256/$run --budget-s 100 --batches $batches --contexts 8192 --policies "writescope transfer-all monolithic" $spec > /tmp/g256/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g256/$run/bench-$arch.csv | grep -E "over transfer-all|over monolithic|time over" | cut -c1-250
  python3 deploy/modes_report.py /tmp/g256/$run/steps-$arch.csv | grep "^explorations of" | cut -c1-200
  tar czf $OUT/g256.tgz -C /tmp g256  # what has run so far, should the call be cut
}
for run in on1 off1 off2 on2 on3 off3; do trio ds-$run deepseek_v2 deepseek_v2:3:8:80 4,16; done
for run in on1 off1 off2 on2; do trio qw-$run qwen3_moe qwen3_moe:3:8:90 4; done
for arm in on off; do for m in ds:deepseek_v2 qw:qwen3_moe; do
  python3 deploy/best_baseline_report.py /tmp/g256/${m%%:*}-$arm*/bench-${m#*:}.csv 2>/dev/null | sed -n '/^Against one/,/^writescope over the point/p' | tail -n +2 | sed "s/^/$arm pooled: /" | cut -c1-260
done; done
if [[ $(($(date +%s) - CALL_START)) -lt 440 ]]; then
  mkdir -p /tmp/c/on; SECONDS=0; timeout 130 deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles 3 --load-threads 8 --out /tmp/c/on > /tmp/c/on/contention.log 2>&1; echo "contention rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/on/contention-steps.csv /tmp/c/on/contention-events.csv --warmup /tmp/c/on/contention-warmup.csv > /tmp/c/on/contention-report.txt 2>&1; sed -n 2p /tmp/c/on/contention-report.txt | cut -c1-220; grep -A8 Reaction /tmp/c/on/contention-report.txt | cut -c1-220
else echo "contention skipped (time)"; fi
gzip /tmp/g256/*/steps-*.csv /tmp/g256/*/warmup-*.csv /tmp/c/*/*.csv 2>/dev/null; tar czf $OUT/g256.tgz -C /tmp g256 c
