# Run 225 (bb2e5bc): rest_shift_scaled A/B under contention, writescope alone, Qwen3 16 x 32K,
# an 8-thread triad on for 10 s and off for 10 s, 3 times per trio (contention.sh --cycles):
# scaled (the default), then the fall alone (--rest_shift_scaled=false).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for run in scaled fall; do
  flags=""; [[ $run == fall ]] && flags="--rest_shift_scaled=false"
  mkdir -p /tmp/c/$run; WS_COORDINATOR_FLAGS="$flags" timeout 120 deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles 3 --load-threads 8 --out /tmp/c/$run > /tmp/c/$run/contention.log 2>&1; echo "$run rc=$?"
  python3 deploy/contention_report.py /tmp/c/$run/contention-steps.csv /tmp/c/$run/contention-events.csv --warmup /tmp/c/$run/contention-warmup.csv > /tmp/c/$run/contention-report.txt 2>&1; sed -n 2p /tmp/c/$run/contention-report.txt; grep -A5 Reaction /tmp/c/$run/contention-report.txt
  gzip /tmp/c/$run/*.csv; tar czf $OUT/c.tgz -C /tmp c
done
