# Run 210 (f5336a3: Q stale at a batch change, GPU-only steps stand in for it): the CUDA
# e2e, then Qwen3's and DeepSeek's whole grids and Mixtral's 8K points, as runs 207-208.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e.log
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g210q --budget-s 175 --archive $OUT/gq.tgz qwen3_moe:2:24:170 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A6 "vs the best baseline" /tmp/g210q/report-qwen3_moe.txt | head -6
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g210d --budget-s 140 --archive $OUT/gd.tgz deepseek_v2:2:24:135 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A6 "vs the best baseline" /tmp/g210d/report-deepseek_v2.txt | head -6
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g210m --budget-s 130 --archive $OUT/gm.tgz --batches 16,32 --contexts 8192 mixtral:2:16:125 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A3 "vs the best baseline" /tmp/g210m/report-mixtral.txt | head -3
