# Run 207: the CUDA e2e first (also the fresh lease's settling time), then DeepSeek's share
# sweep at 16 and 32 x 32K (static 0.40-0.60 beside writescope and monolithic, 3 x 16 steps),
# the first sweep whose steps CSV carries the scheduler's lines (which line puts r* below the
# swept optimum?), then Qwen3's whole grid on the headroom's build.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -2 $OUT/e2e.log
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g207 --budget-s 120 --archive $OUT/g.tgz --batches 16,32 --contexts 32768 --policies "writescope monolithic static:0.4 static:0.44 static:0.48 static:0.52 static:0.56 static:0.6" deepseek_v2:3:16:110 > $OUT/grids.log 2>&1; echo "grids rc=$?"; grep -E "^batch|best static|writescope|monolithic" /tmp/g207/sweep-*.txt | head -20
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g207q --budget-s 200 --archive $OUT/gq.tgz qwen3_moe:2:24:190 > $OUT/gridsq.log 2>&1; echo "gridsq rc=$?"; grep -A8 "vs the best baseline" /tmp/g207q/report-qwen3_moe.txt | head -8
