# Run 238 (prepared in session 45, no GPU machine then): Qwen3's and DeepSeek's whole grids in
# turns, 2 rounds x 3 turns of 8 measured steps per point and policy (48, as the 2 x 24 of runs
# 222-233), 4 warm-up steps before each turn after a point's first. The policies' turns then
# lie ~12 steps apart instead of ~40; best_baseline_report.py pairs them per turn.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --turns 3 --turn-warmup 4 --no-probe --out /tmp/g238q --budget-s 230 --archive $OUT/gq.tgz qwen3_moe:2:8:210 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A6 "vs the best baseline" /tmp/g238q/report-qwen3_moe.txt | head -6
deploy/gpu-grids.sh --one-runtime --turns 3 --turn-warmup 4 --no-probe --out /tmp/g238d --budget-s 190 --archive $OUT/gd.tgz deepseek_v2:2:8:170 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A6 "vs the best baseline" /tmp/g238d/report-deepseek_v2.txt | head -6
for a in q:qwen3_moe d:deepseek_v2; do python3 deploy/best_baseline_report.py /tmp/g238${a%%:*}/bench-${a#*:}.csv | sed -n '/^Paired/,$p'; python3 deploy/expert_drift_report.py /tmp/g238${a%%:*}/steps-${a#*:}.csv; done
# Ran in session 47 (2026-12-05 04:32-04:36 UTC, bundle of 8822cfc plus bf650e6's test changes;
# wall 259.5 s): gq/ and gd/ are the archives, steps and warm-up CSVs gzipped here.
