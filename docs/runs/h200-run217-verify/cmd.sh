# Run 217 (cd647ee, d0a282d's repeat of an exploration that measured nothing): the CUDA e2e;
# contention as run 216 (Qwen3 16 x 32K, an 8-thread triad from 10 s for 20 s); then Mixtral
# 4 x 32K (below 0.98x of the best baseline in both rounds of run 215) over 6 rounds of 32
# steps with transfer-all, monolithic and cpu-all beside it.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e.log
mkdir -p $OUT/c; timeout 260 deploy/contention.sh --policies "writescope monolithic static:0.5 transfer-all" --before 10 --during 20 --after 10 --load-threads 8 --out $OUT/c > $OUT/c/contention.log 2>&1; echo "contention rc=$?"; tail -1 $OUT/c/contention.log
python3 deploy/contention_report.py $OUT/c/contention-steps.csv $OUT/c/contention-events.csv > $OUT/c/contention-report.txt 2>&1; sed -n 1,12p $OUT/c/contention-report.txt
gzip $OUT/c/contention-steps.csv
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g217m --budget-s 170 --archive $OUT/gm.tgz --batches 4 --contexts 32768 --policies "writescope transfer-all monolithic cpu-all" mixtral:6:32:165 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A3 "vs the best baseline" /tmp/g217m/report-mixtral.txt | head -3
