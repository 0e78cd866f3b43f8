# Run 257 (session 52): contention with --charge_exploration_overrun (run 256's step 4, which
# found no ws_cpu_load in its bundle): Qwen3 16 x 32K, writescope alone, an 8-thread load on
# 10 s, off 10 s, 3 times; the charge on, then off as time allows.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe ws_cpu_load" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
for arm in on off; do
  [[ $arm == off && $(($(date +%s) - CALL_START)) -gt 200 ]] && { echo "off skipped (time)"; continue; }
  flags=""; [[ $arm == off ]] && flags="--charge_exploration_overrun=false"
  mkdir -p /tmp/c/$arm; SECONDS=0; WS_COORDINATOR_FLAGS="$flags" timeout 130 deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles 3 --load-threads 8 --out /tmp/c/$arm > /tmp/c/$arm/contention.log 2>&1; echo "contention $arm rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/$arm/contention-steps.csv /tmp/c/$arm/contention-events.csv --warmup /tmp/c/$arm/contention-warmup.csv > /tmp/c/$arm/contention-report.txt 2>&1; sed -n 2p /tmp/c/$arm/contention-report.txt | cut -c1-220; grep -A8 Reaction /tmp/c/$arm/contention-report.txt | cut -c1-220
  gzip /tmp/c/$arm/*.csv 2>/dev/null; tar czf $OUT/c257.tgz -C /tmp c
done
