# Run 218 (rest_shift_explore): contention as runs 216-217 (Qwen3 16 x 32K, an 8-thread triad
# from 10 s for 20 s), the warm-up steps recorded too; then Qwen3's whole grid, 2 rounds of 24
# steps in one runtime (as run 214).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
mkdir -p /tmp/c; timeout 260 deploy/contention.sh --policies "writescope monolithic static:0.5 transfer-all" --before 10 --during 20 --after 10 --load-threads 8 --out /tmp/c > /tmp/c/contention.log 2>&1; echo "contention rc=$?"; tail -1 /tmp/c/contention.log
python3 deploy/contention_report.py /tmp/c/contention-steps.csv /tmp/c/contention-events.csv > /tmp/c/contention-report.txt 2>&1; sed -n 1,12p /tmp/c/contention-report.txt
gzip /tmp/c/*.csv; tar czf $OUT/c.tgz -C /tmp c
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g218q --budget-s 175 --archive $OUT/gq.tgz qwen3_moe:2:24:170 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A6 "vs the best baseline" /tmp/g218q/report-qwen3_moe.txt | head -6
