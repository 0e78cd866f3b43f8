# Run 221 (ff1ffbb, a split exploration whose share moved runs one step more): writescope
# alone under run 220's contention (Qwen3 16 x 32K, an 8-thread triad from 10 s for 20 s),
# the warm-up steps recorded; the session's last device seconds.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
mkdir -p /tmp/c/x; timeout 90 deploy/contention.sh --policies writescope --before 10 --during 20 --after 10 --load-threads 8 --out /tmp/c/x > /tmp/c/x/contention.log 2>&1; echo "rc=$?"
python3 deploy/contention_report.py /tmp/c/x/contention-steps.csv /tmp/c/x/contention-events.csv --warmup /tmp/c/x/contention-warmup.csv > /tmp/c/x/contention-report.txt 2>&1; sed -n 2p /tmp/c/x/contention-report.txt; tail -1 /tmp/c/x/contention-report.txt
gzip /tmp/c/x/*.csv; tar czf $OUT/c.tgz -C /tmp/c x
