# Run 220: contention A/B of rest_shift_explore, writescope alone, as runs 216-218 (Qwen3 16 x
# 32K, an 8-thread triad from 10 s for 20 s): on (the default), off (--rest_shift_explore=0),
# on, off, each in its own trio.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for run in on1 off1 on2 off2; do
  flags=""; [[ $run == off* ]] && flags="--rest_shift_explore=0"
  mkdir -p /tmp/c/$run; WS_COORDINATOR_FLAGS="$flags" timeout 100 deploy/contention.sh --policies writescope --before 10 --during 20 --after 10 --load-threads 8 --out /tmp/c/$run > /tmp/c/$run/contention.log 2>&1; echo "$run rc=$?"
  python3 deploy/contention_report.py /tmp/c/$run/contention-steps.csv /tmp/c/$run/contention-events.csv --warmup /tmp/c/$run/contention-warmup.csv > /tmp/c/$run/contention-report.txt 2>&1; sed -n 2p /tmp/c/$run/contention-report.txt; tail -1 /tmp/c/$run/contention-report.txt
  gzip /tmp/c/$run/*.csv; tar czf $OUT/c.tgz -C /tmp c
done
