# Run 286 (session 64, 2026-12-07, H100): issue 7's contention experiment with the scheduler's
# rest_rise rule (cd22777) on and off (--rest_rise_gap_share=0), writescope alone, Qwen3 4
# layers, 16 x 32K (contention.sh's defaults), an 8-thread CPU + DRAM load for 10 s, 2 cycles
# 10 s apart, as runs 257 and 273 (../h100-run273-contention-defaults/). The rule must not
# explore the split under the load (its CPU attention runs slow there) nor slow its return.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_cpu_load \
#     attention_bench" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
for arm in on off; do
  flags=""; [[ $arm == off ]] && flags="--rest_rise_gap_share=0"
  mkdir -p /tmp/c/$arm; SECONDS=0; WS_COORDINATOR_FLAGS="$flags" timeout ${LIMIT_S:-110} deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles ${CYCLES:-2} --load-threads 8 --out /tmp/c/$arm > /tmp/c/$arm/contention.log 2>&1; echo "contention $arm rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/$arm/contention-steps.csv /tmp/c/$arm/contention-events.csv --warmup /tmp/c/$arm/contention-warmup.csv > /tmp/c/$arm/contention-report.txt 2>&1; sed -n 1,40p /tmp/c/$arm/contention-report.txt | cut -c1-220
  grep -c rest_rise /tmp/c/$arm/contention-steps.csv
done
gzip /tmp/c/*/*.csv 2>/dev/null; tar czf $OUT/c.tgz -C /tmp c
echo "call $(($(date +%s) - CALL_START))s"
