# Runs 271-272 (session 57, 2026-12-06, an H100 80GB HBM3; 414 s and 303 s): the median of
# three (coordinator --rest_median_of_three, on since 616c9e7) against the rests as they were,
# at DeepSeek-V2-Lite 27 layers, 4 x 8K, writescope and transfer-all in turns in one trio per
# arm (run 259's protocol, without monolithic so that more rounds fit). Run 269 on the H200:
# 145 chosen split steps in 1840 ran 3.6-7.3 ms over transfer-all's (0.9 % of writescope's
# time), flipped by single slow steps.
# Run 271: ARMS="on1 off1" (215 s each); run 272: ARMS="off2 on2" SECS=165 TOTAL_S=420.
# Results: on1/ off1/ off2/ on2/ (steps CSVs, mode-cost, reports), docs/measurements.md
# "Session 57". best_baseline_report.py wants two baselines: paired_ratio.py here gives the
# ratios by its method.
# The bundle: rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope" \
#   deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
mkdir -p /tmp/g271
trio() {  # NAME FLAGS SECONDS
  local run=$1 flags=$2 secs=$3 arch=deepseek_v2
  SECONDS=0; WS_COORDINATOR_FLAGS="$flags" deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g271/$run --budget-s $((secs + 20)) --layers 27 --batches 4 --contexts 8192 --policies "writescope transfer-all" $arch:40:8:$secs > /tmp/g271/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g271/$run/bench-$arch.csv | grep -E "over transfer-all|time over" | cut -c1-250
  python3 deploy/mode_cost_report.py /tmp/g271/$run/steps-$arch.csv 2>&1 | head -12
  gzip /tmp/g271/$run/steps-*.csv /tmp/g271/$run/warmup-*.csv 2>/dev/null
  tar czf $OUT/g271.tgz -C /tmp g271  # what has run so far, should the call be cut
}
left() { echo $(( ${TOTAL_S:-540} - ($(date +%s) - CALL_START) )); }
# Arms in ARMS order (run 271: "on1 off1"; run 272, its repeat in the other order: "off2 on2"),
# each SECS (215) at most.
arms=(${ARMS:-on1 off1}); secs=${SECS:-215}
trio ${arms[0]} "--rest_median_of_three=$([[ ${arms[0]} == on* ]] && echo true || echo false)" $secs
trio ${arms[1]} "--rest_median_of_three=$([[ ${arms[1]} == on* ]] && echo true || echo false)" $(( $(left) - 50 < secs ? $(left) - 50 : secs ))
echo "call $(($(date +%s) - CALL_START))s"
