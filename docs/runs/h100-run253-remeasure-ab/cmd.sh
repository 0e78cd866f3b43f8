# Run 253 (session 51): a rest raised by a slow pair re-measured (--remeasure_after_rise,
# 2217153, default on) against the old rule (=false), as run 250 ran the cap: DeepSeek 4 and 16
# x 8K, writescope / transfer-all / monolithic in one runtime, 3 rounds x 10 turns of 8 steps,
# six trios in the order on, off, off, on, on, off; then contention (Qwen3 16 x 32K, writescope,
# the rule on, an 8-thread load on 10 s and off 10 s, 3 times) while the call has room.
# Run 250's on2 trio ran GPU-only 48 steps after split steps of 21.8 and 12.4 ms raised the
# split's rest from 5.3 to 8.8 ms, where the split's next samples put it at 4.3.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe ws_cpu_load" deploy/gpu-bundle.sh
# Ran in session 51 on an H100 80GB HBM3 (kind nvidia-h100-x1), 28e6f63, wall 280.5 s.
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; mkdir -p /tmp/g253
for run in on1 off1 off2 on2 on3 off3; do
  [[ $(($(date +%s) - CALL_START)) -gt 470 ]] && { echo "$run skipped (time)"; continue; }
  flags=""; [[ $run == off* ]] && flags="--remeasure_after_rise=false"
  SECONDS=0; WS_COORDINATOR_FLAGS="$flags" deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g253/$run --budget-s 100 --batches 4,16 --contexts 8192 --policies "writescope transfer-all monolithic" deepseek_v2:3:8:80 > /tmp/g253/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g253/$run/bench-deepseek_v2.csv | grep -E "over transfer-all|over monolithic" | cut -c1-130
  tar czf $OUT/g253.tgz -C /tmp g253  # what has run so far, should the call be cut
done
for arm in on off; do
  python3 deploy/best_baseline_report.py /tmp/g253/$arm*/bench-deepseek_v2.csv 2>/dev/null | sed -n '/^Against one/,/^writescope over the point/p' | tail -n +2 | sed "s/^/$arm pooled: /" | cut -c1-340
done
if [[ $(($(date +%s) - CALL_START)) -lt 440 ]]; then
  mkdir -p /tmp/c/on; SECONDS=0; timeout 130 deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles 3 --load-threads 8 --out /tmp/c/on > /tmp/c/on/contention.log 2>&1; echo "contention rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/on/contention-steps.csv /tmp/c/on/contention-events.csv --warmup /tmp/c/on/contention-warmup.csv > /tmp/c/on/contention-report.txt 2>&1; sed -n 2p /tmp/c/on/contention-report.txt | cut -c1-220; grep -A8 Reaction /tmp/c/on/contention-report.txt | cut -c1-220
else echo "contention skipped (time)"; fi
gzip /tmp/g253/*/steps-*.csv /tmp/g253/*/warmup-*.csv /tmp/c/*/*.csv 2>/dev/null; tar czf $OUT/g253.tgz -C /tmp g253 c
