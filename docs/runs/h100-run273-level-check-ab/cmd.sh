# Runs 273-276 (session 58, 2026-12-06, H100 80GB HBM3s, 029242c). Run 273 (a first lease,
# a noisy host: steps of 40 ms where the others took 26, stalls of 100-230 ms): issue 7's
# contention experiment with the scheduler's defaults (the median of three, 616c9e7, and the
# level check, 029242c, on), writescope alone, Qwen3 4 layers, 16 x 32K (contention.sh's
# defaults), an 8-thread CPU + DRAM load for 10 s, 2 cycles 10 s apart, as run 257's
# (../h100-run273-contention-defaults/); then the level check's A/B at DeepSeek-V2-Lite
# 27 layers, 4 x 8K, writescope and transfer-all in turns, one trio per arm (runs 271-272's
# protocol), ARMS="on1 off1"; 474 s.
# Run 274 (a second lease, a quiet host): SKIP_CONTENTION=1 ARMS="off2 on2"; 485 s.
# Run 275 (the same lease, warm): SKIP_CONTENTION=1 ARMS="on3" TOTAL_S=440 SECS=400; 292 s.
# Run 276 (the same lease, warm): SKIP_CONTENTION=1 ARMS="off3" TOTAL_S=350 SECS=320; 294 s.
# Results: on1/ ... off3/ (steps and warm-up CSVs, mode-cost and report), docs/measurements.md
# "Session 58". The ratios by round:
#   python3 docs/runs/h100-run271-median-ab/paired_ratio.py docs/runs/h100-run273-level-check-ab/*/steps-*.csv.gz
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_cpu_load" \
#     deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
left() { echo $(( ${TOTAL_S:-560} - ($(date +%s) - CALL_START) )); }
if [[ -z ${SKIP_CONTENTION:-} ]]; then
  mkdir -p /tmp/c/on; SECONDS=0; timeout ${LIMIT_S:-110} deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles ${CYCLES:-2} --load-threads 8 --out /tmp/c/on > /tmp/c/on/contention.log 2>&1; echo "contention rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/on/contention-steps.csv /tmp/c/on/contention-events.csv --warmup /tmp/c/on/contention-warmup.csv > /tmp/c/on/contention-report.txt 2>&1; sed -n 1,40p /tmp/c/on/contention-report.txt | cut -c1-220
  gzip /tmp/c/on/*.csv 2>/dev/null; tar czf $OUT/c.tgz -C /tmp c
fi
mkdir -p /tmp/g
trio() {  # NAME FLAGS SECONDS
  local run=$1 flags=$2 secs=$3 arch=deepseek_v2
  SECONDS=0; WS_COORDINATOR_FLAGS="$flags" deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g/$run --budget-s $((secs + 20)) --layers 27 --batches 4 --contexts 8192 --policies "writescope transfer-all" $arch:40:8:$secs > /tmp/g/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g/$run/bench-$arch.csv | grep -E "over transfer-all|time over" | cut -c1-250
  python3 deploy/mode_cost_report.py /tmp/g/$run/steps-$arch.csv 2>&1 | head -12
  gzip /tmp/g/$run/steps-*.csv /tmp/g/$run/warmup-*.csv 2>/dev/null
  tar czf $OUT/g.tgz -C /tmp g  # what has run so far, should the call be cut
}
arms=(${ARMS:-on1 off1})
secs=$(( ($(left) - 20 - 40 * (${#arms[@]} - 1)) / ${#arms[@]} )); (( secs > ${SECS:-260} )) && secs=${SECS:-260}
trio ${arms[0]} "--rest_level_check=$([[ ${arms[0]} == on* ]] && echo true || echo false)" $secs
if (( ${#arms[@]} > 1 )); then
  secs2=$(( $(left) - 40 )); (( secs2 > secs )) && secs2=$secs
  trio ${arms[1]} "--rest_level_check=$([[ ${arms[1]} == on* ]] && echo true || echo false)" $secs2
fi
echo "call $(($(date +%s) - CALL_START))s"
