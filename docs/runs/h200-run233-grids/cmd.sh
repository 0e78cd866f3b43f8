# Run 233 (f6a6cf3, the build of runs 231-232): Qwen3's and DeepSeek's whole grids (2 rounds of 24
# steps each, as runs 222-223 and 227): two more rounds per point on the last build.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g233q --budget-s 175 --archive $OUT/gq.tgz qwen3_moe:2:24:170 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A6 "vs the best baseline" /tmp/g233q/report-qwen3_moe.txt | head -6
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g233d --budget-s 140 --archive $OUT/gd.tgz deepseek_v2:2:24:135 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A6 "vs the best baseline" /tmp/g233d/report-deepseek_v2.txt | head -6
