# Run 216 (898215e): contention on this session's build, as run 200: Qwen3 16 x 32K, an
# 8-thread triad from 10 s for 20 s, writescope beside monolithic, static:0.5, transfer-all.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
mkdir -p $OUT/c; timeout 260 deploy/contention.sh --policies "writescope monolithic static:0.5 transfer-all" --before 10 --during 20 --after 10 --load-threads 8 --out $OUT/c > $OUT/c/contention.log 2>&1; echo "contention rc=$?"; tail -1 $OUT/c/contention.log
python3 deploy/contention_report.py $OUT/c/contention-steps.csv $OUT/c/contention-events.csv > $OUT/c/contention-report.txt 2>&1; sed -n 1,12p $OUT/c/contention-report.txt
gzip $OUT/c/contention-steps.csv
