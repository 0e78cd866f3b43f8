# Run 273 (session 57; NOT RUN: its one try, on an H100, found no ws_cpu_load in a bundle of
# the four trio binaries, and the session's device time was then spent). Issue 7's contention
# experiment with the median of three on (616c9e7; its code as f95a486's), writescope alone,
# Qwen3 4 layers, 16 x 32K (contention.sh's defaults), a CPU + DRAM load of 8 threads for
# 10 s, CYCLES times (2), 10 s apart; as run 256's "on" arm. The median takes a new level a
# step later (scheduler_test), so this is where a slower reaction to the load would show.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_cpu_load" \
#     deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
mkdir -p /tmp/c/on; SECONDS=0; timeout ${LIMIT_S:-110} deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles ${CYCLES:-2} --load-threads 8 --out /tmp/c/on > /tmp/c/on/contention.log 2>&1; echo "contention rc=$? ${SECONDS}s"
python3 deploy/contention_report.py /tmp/c/on/contention-steps.csv /tmp/c/on/contention-events.csv --warmup /tmp/c/on/contention-warmup.csv > /tmp/c/on/contention-report.txt 2>&1; sed -n 1,40p /tmp/c/on/contention-report.txt | cut -c1-220
gzip /tmp/c/on/*.csv 2>/dev/null; tar czf $OUT/c273.tgz -C /tmp c
