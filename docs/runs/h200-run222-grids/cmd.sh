# Run 222 (d2500ad, the build of run 221): Qwen3's whole grid (2 rounds of 24 steps, as run
# 218) and Mixtral's (2 rounds of 16 steps, as run 219), each in one runtime.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g222q --budget-s 175 --archive $OUT/gq.tgz qwen3_moe:2:24:170 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A6 "vs the best baseline" /tmp/g222q/report-qwen3_moe.txt | head -6
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g222m --budget-s 330 --archive $OUT/gm.tgz mixtral:2:16:325 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A6 "vs the best baseline" /tmp/g222m/report-mixtral.txt | head -6
