# Run 223 (d2500ad, the build of runs 221-222): DeepSeek's whole grid (2 rounds of 24 steps,
# as run 219), then the full DeepSeek-V2-Lite (27 layers) at 32 x 32K, the 1M-token point
# (as run 204; not run since session 37).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g223d --budget-s 140 --archive $OUT/gd.tgz deepseek_v2:2:24:135 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A6 "vs the best baseline" /tmp/g223d/report-deepseek_v2.txt | head -6
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g223a --budget-s 270 --archive $OUT/g27.tgz --layers 27 --batches 32 --contexts 32768 deepseek_v2:2:16 > $OUT/grids27.log 2>&1; echo "grids27 rc=$?"; tail -3 $OUT/grids27.log; grep -A2 "vs the best baseline" /tmp/g223a/report-deepseek_v2.txt | head -3
