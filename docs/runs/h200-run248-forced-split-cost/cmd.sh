# Run 248 (session 50; ran on an H200 at ~13:55 UTC after five more failed starts, 35cb86a,
# wall 277.7 s): the split's forced explorations capped by their cost
# (--max_period_cost_share, default 0.015; 0 = forced every 40 decisions as before).
# 1. DeepSeek 4 and 16 x 8K, writescope / transfer-all / monolithic in one runtime, 3 rounds x 10
#    turns of 8 steps, the cap on and off in the order on, off, off, on (runs 246-247 on an H100:
#    writescope 0.919-0.950x of transfer-all there, 9-15 of 240 steps forced split explorations
#    at 12-13 ms over transfer-all's step).
# 2. Contention, Qwen3 16 x 32K, writescope alone: an 8-thread load on 10 s, off 10 s, 3 times,
#    cap on then off (run 226: the split back 0.28-0.77 s after a load).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe ws_cpu_load" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; mkdir -p /tmp/g248
for run in on1 off1 off2 on2; do
  flags=""; [[ $run == off* ]] && flags="--max_period_cost_share=0"
  SECONDS=0; WS_COORDINATOR_FLAGS="$flags" deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g248/$run --budget-s 100 --batches 4,16 --contexts 8192 --policies "writescope transfer-all monolithic" deepseek_v2:3:8:80 > /tmp/g248/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g248/$run/bench-deepseek_v2.csv | grep -E "over transfer-all|over monolithic" | cut -c1-130
  tar czf $OUT/g248.tgz -C /tmp g248  # what has run so far, should the call be cut
done
python3 deploy/best_baseline_report.py /tmp/g248/on1/bench-deepseek_v2.csv /tmp/g248/on2/bench-deepseek_v2.csv 2>/dev/null | sed -n '/^Against one/,/^writescope over the point/p' | tail -3 | sed 's/^/on pooled: /' | cut -c1-150
python3 deploy/best_baseline_report.py /tmp/g248/off1/bench-deepseek_v2.csv /tmp/g248/off2/bench-deepseek_v2.csv 2>/dev/null | sed -n '/^Against one/,/^writescope over the point/p' | tail -3 | sed 's/^/off pooled: /' | cut -c1-150
for run in on off; do
  flags=""; [[ $run == off ]] && flags="--max_period_cost_share=0"
  # The second trio only while the call's 590 s leave room for it (the A/B comes first).
  [[ $run == off && $(($(date +%s) - CALL_START)) -gt 330 ]] && { echo "contention off skipped"; continue; }
  mkdir -p /tmp/c/$run; SECONDS=0; WS_COORDINATOR_FLAGS="$flags" timeout 130 deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles 3 --load-threads 8 --out /tmp/c/$run > /tmp/c/$run/contention.log 2>&1; echo "contention $run rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/$run/contention-steps.csv /tmp/c/$run/contention-events.csv --warmup /tmp/c/$run/contention-warmup.csv > /tmp/c/$run/contention-report.txt 2>&1; sed -n 2p /tmp/c/$run/contention-report.txt | cut -c1-220; grep -A8 Reaction /tmp/c/$run/contention-report.txt | cut -c1-220
  tar czf $OUT/g248.tgz -C /tmp g248 c
done
gzip /tmp/g248/*/steps-*.csv /tmp/g248/*/warmup-*.csv /tmp/c/*/*.csv 2>/dev/null; tar czf $OUT/g248.tgz -C /tmp g248 c
