# Run 206: the CUDA e2e on 028fcfe with the calibration check that takes a probe line's slope
# or fixed cost (run 205's fresh lease fitted the CPU probe's slope to 0), then DeepSeek's share
# sweep again with the placement headroom (run 205's sweep ran on a lease still settling).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; grep -E "FAIL|calibrated once" $OUT/e2e.log; tail -1 $OUT/e2e.log
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g206 --budget-s 110 --archive $OUT/g.tgz --batches 16,32 --contexts 32768 --policies "writescope monolithic static:0.4 static:0.45 static:0.5 static:0.55" deepseek_v2:3:16:90 > $OUT/grids.log 2>&1; echo "grids rc=$?"; cat /tmp/g206/sweep-*.txt | grep -E "^batch|best static|writescope|monolithic"
