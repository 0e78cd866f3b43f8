# Run 212 (58edbd8): writescope against transfer-all at the batch-4 8K points over 6 rounds of
# 32 steps in one runtime each (run 210 had them below 0.98x in both of its 2 rounds), then
# Mixtral's 32K points on this build (not run on f5336a3: the device time ran out in session 39).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g212d --budget-s 75 --archive $OUT/gd.tgz --batches 4 --contexts 8192 --policies "writescope transfer-all" deepseek_v2:6:32:70 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A3 "vs the best baseline" /tmp/g212d/report-deepseek_v2.txt | head -3
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g212q --budget-s 75 --archive $OUT/gq.tgz --batches 4 --contexts 8192 --policies "writescope transfer-all" qwen3_moe:6:32:70 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A3 "vs the best baseline" /tmp/g212q/report-qwen3_moe.txt | head -3
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g212m --budget-s 300 --archive $OUT/gm.tgz --contexts 32768 mixtral:2:16:295 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A4 "vs the best baseline" /tmp/g212m/report-mixtral.txt | head -4
