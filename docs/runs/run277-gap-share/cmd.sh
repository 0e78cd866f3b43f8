# Run 277 (session 59, 2026-12-06): issue 7's contention experiment with the split's share of
# the gap for a fallen rest (SchedulerOptions::rest_shift_split_gap_share) at its default, 0.7
# ("s07"), and at 1 ("s10", the rule before it), in turns, one trio each: Qwen3 4 layers,
# 16 x 32K (contention.sh's defaults), an 8-thread CPU + DRAM load for 10 s, CYCLES cycles
# 10 s apart (runs 257 and 273's protocol); then, if time is left, DeepSeek-V2-Lite 27 layers
# 4 x 8K, writescope and transfer-all in turns, one trio per arm of DARMS (runs 271-276's
# protocol; "def1" by default: the defaults; e05*: half the exploration credit's share).
# Later calls of the same lease: CARMS="" (no contention) DARMS="e05a def2" and so on. The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_cpu_load \
#     attention_bench" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1; lscpu | grep -E "L3|Model name"
# Session 60: first, if the bundle has attention_bench, issue 4's batch-1 floors (~10 s): reads
# of a decode's bytes by n SMs alone and empty launches (pairs, clusters of 8 and 16).
if [[ -x $WS_BIN/attention_bench && -z ${NO_FLOORS:-} ]]; then
  SECONDS=0; /tmp/ws/run.sh attention_bench --no-cpu --no-mla --no-gqa --no-merge --no-logits --tokens=8192,32768,131072 --iters=15 > $OUT/floors.txt 2>&1; echo "floors rc=$? ${SECONDS}s"; cat $OUT/floors.txt | cut -c1-250
fi
left() { echo $(( ${TOTAL_S:-560} - ($(date +%s) - CALL_START) )); }
contention() {  # NAME SHARE
  mkdir -p /tmp/c/$1; SECONDS=0
  WS_COORDINATOR_FLAGS="--rest_shift_split_gap_share=$2" timeout ${LIMIT_S:-150} deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles ${CYCLES:-3} --load-threads 8 --out /tmp/c/$1 > /tmp/c/$1/contention.log 2>&1; echo "$1 contention rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/$1/contention-steps.csv /tmp/c/$1/contention-events.csv --warmup /tmp/c/$1/contention-warmup.csv > /tmp/c/$1/contention-report.txt 2>&1; sed -n 1,40p /tmp/c/$1/contention-report.txt | cut -c1-220
  gzip /tmp/c/$1/*.csv 2>/dev/null; tar czf $OUT/c.tgz -C /tmp c
}
for arm in ${CARMS-s07 s10}; do
  contention $arm $([[ $arm == s07 ]] && echo 0.7 || echo 1)
done
mkdir -p /tmp/g
trio() {  # NAME FLAGS SECONDS
  local run=$1 flags=$2 secs=$3 arch=deepseek_v2
  SECONDS=0; WS_COORDINATOR_FLAGS="$flags" deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g/$run --budget-s $((secs + 20)) --layers 27 --batches 4 --contexts 8192 --policies "writescope transfer-all" $arch:40:8:$secs > /tmp/g/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g/$run/bench-$arch.csv | grep -E "over transfer-all|time over" | cut -c1-250
  python3 deploy/mode_cost_report.py /tmp/g/$run/steps-$arch.csv 2>&1 | head -12
  gzip /tmp/g/$run/steps-*.csv /tmp/g/$run/warmup-*.csv 2>/dev/null
  tar czf $OUT/g.tgz -C /tmp g
}
# DeepSeek arms: def* the defaults, e05* --explore_cost_share=0.005 (half the credit's share).
darms=(${DARMS:-def1}); n=${#darms[@]}
for ((i = 0; i < n; ++i)); do
  secs=$(( ($(left) - 45 * (n - i)) / (n - i) )); (( secs > ${SECS:-400} )) && secs=${SECS:-400}
  (( secs >= 120 )) || break
  trio ${darms[i]} "$([[ ${darms[i]} == e05* ]] && echo --explore_cost_share=0.005)" $secs
done
echo "call $(($(date +%s) - CALL_START))s"
