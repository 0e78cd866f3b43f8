# Run 197: contention with distinct bench rows and the split products (9e5f45d): Qwen3
# 16 x 32K, an 8-thread triad from 10 s for 20 s, writescope / static:0.5 / transfer-all.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/contention.sh --policies "writescope static:0.5 transfer-all" --before 10 --during 20 --after 10 --load-threads 8 --out $OUT > $OUT/contention.log 2>&1; echo "contention rc=$?"; tail -3 $OUT/contention.log
python3 deploy/contention_report.py $OUT/contention-steps.csv $OUT/contention-events.csv 2>&1 | tee $OUT/contention-report.txt | tail -20
