# Run 226 (1d0f250, the session's last code): the steps' explore_reason on the H200, in the
# little device time left: writescope alone under a short load (4 s before, 4 s on, 6 s after),
# Qwen3 16 x 32K.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
mkdir -p $OUT/c; timeout 60 deploy/contention.sh --policies writescope --before 4 --during 4 --after 6 --load-threads 8 --out $OUT/c > $OUT/c/contention.log 2>&1; echo "rc=$?"
python3 deploy/contention_report.py $OUT/c/contention-steps.csv $OUT/c/contention-events.csv --warmup $OUT/c/contention-warmup.csv --settle 1 2>&1 | tail -3
awk -F, 'NR > 1 && $15 == 1 {print $NF}' $OUT/c/contention-steps.csv $OUT/c/contention-warmup.csv | sort | uniq -c
gzip $OUT/c/*.csv
