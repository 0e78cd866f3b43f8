# Run 255 (session 52): run 254's A/B of --charge_exploration_overrun (default true; false =
# an exploration charged its prediction, as before) once more (it ran on the same H100 lease,
# warm, right after run 254), no e2e:
# 1. DeepSeek 4 and 16 x 8K, writescope / transfer-all / monolithic in one runtime, 3 rounds x
#    10 turns of 8 steps, six arms in the order off, on, on, off, off, on (run 254's reversed).
# 2. Qwen3 4 x 8K, arms off, on, on, off, as time allows.
# Each trio read by best_baseline_report.py (where writescope's time went) and modes_report.py
# (what the explorations paid and spent); pooled per arm at the end.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
mkdir -p /tmp/g255
trio() {  # NAME ARCH SPEC BATCHES
  local run=$1 arch=$2 spec=$3 batches=$4 flags=""
  [[ $(($(date +%s) - CALL_START)) -gt 500 ]] && { echo "$run skipped (time)"; return; }
  [[ $run == *off* ]] && flags="--charge_exploration_overrun=false"
  SECONDS=0; WS_COORDINATOR_FLAGS="$flags" deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g255/$run --budget-s 100 --batches $batches --contexts 8192 --policies "writescope transfer-all monolithic" $spec > /tmp/g255/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g255/$run/bench-$arch.csv | grep -E "over transfer-all|over monolithic|time over" | cut -c1-250
  python3 deploy/modes_report.py /tmp/g255/$run/steps-$arch.csv | grep "^explorations of" | cut -c1-200
  tar czf $OUT/g255.tgz -C /tmp g255  # what has run so far, should the call be cut
}
for run in off4 on4 on5 off5 off6 on6; do trio ds-$run deepseek_v2 deepseek_v2:3:8:80 4,16; done
for run in off2 on2 on3 off3; do trio qw-$run qwen3_moe qwen3_moe:3:8:90 4; done
for arm in on off; do for m in ds:deepseek_v2 qw:qwen3_moe; do
  python3 deploy/best_baseline_report.py /tmp/g255/${m%%:*}-$arm*/bench-${m#*:}.csv 2>/dev/null | sed -n '/^Against one/,/^writescope over the point/p' | tail -n +2 | sed "s/^/$arm pooled: /" | cut -c1-260
done; done
gzip /tmp/g255/*/steps-*.csv /tmp/g255/*/warmup-*.csv 2>/dev/null; tar czf $OUT/g255.tgz -C /tmp g255
