# Run 219 (rest_shift_explore, the build of run 218): DeepSeek's whole grid (2 rounds of 24
# steps, as run 214) and Mixtral's (2 rounds of 16 steps, as run 215), each in one runtime.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g219d --budget-s 140 --archive $OUT/gd.tgz deepseek_v2:2:24:135 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A6 "vs the best baseline" /tmp/g219d/report-deepseek_v2.txt | head -6
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g219m --budget-s 330 --archive $OUT/gm.tgz mixtral:2:16:325 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A6 "vs the best baseline" /tmp/g219m/report-mixtral.txt | head -6
