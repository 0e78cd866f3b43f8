# Run 239 (prepared in session 45): Mixtral's whole grid in turns, 2 rounds x 2 turns of 8
# measured steps (32, as the 2 x 16 of runs 222-234), 4 warm-up steps before a point's second
# turn; ~10 % more steps than run 234, which stopped at 310 s of 325.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --turns 2 --turn-warmup 4 --no-probe --out /tmp/g239m --budget-s 430 --archive $OUT/gm.tgz mixtral:2:8:425 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A6 "vs the best baseline" /tmp/g239m/report-mixtral.txt | head -6
python3 deploy/best_baseline_report.py /tmp/g239m/bench-mixtral.csv | sed -n '/^Paired/,$p'; python3 deploy/expert_drift_report.py /tmp/g239m/steps-mixtral.csv
# Ran in session 47 (2026-12-05 ~04:50 UTC, bundle of run 240; 323 s of 410): gm/ the archive,
# steps and warm-up CSVs gzipped here.
