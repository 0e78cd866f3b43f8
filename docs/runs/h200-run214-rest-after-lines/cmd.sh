# Run 214 (a rest sample taken against the lines after they learnt from its step): the
# CUDA e2e; writescope against transfer-all at the batch-4 8K points, 6 rounds of 32 steps (as
# run 212); then Qwen3's and DeepSeek's whole grids (as run 210), 2 rounds of 24 steps.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e.log
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g214a --budget-s 75 --archive $OUT/gad.tgz --batches 4 --contexts 8192 --policies "writescope transfer-all" deepseek_v2:6:32:70 > $OUT/gridsad.log 2>&1; echo "gridsad rc=$?"
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g214b --budget-s 75 --archive $OUT/gaq.tgz --batches 4 --contexts 8192 --policies "writescope transfer-all" qwen3_moe:6:32:70 > $OUT/gridsaq.log 2>&1; echo "gridsaq rc=$?"
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g214q --budget-s 175 --archive $OUT/gq.tgz qwen3_moe:2:24:170 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A6 "vs the best baseline" /tmp/g214q/report-qwen3_moe.txt | head -6
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g214d --budget-s 140 --archive $OUT/gd.tgz deepseek_v2:2:24:135 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A6 "vs the best baseline" /tmp/g214d/report-deepseek_v2.txt | head -6
