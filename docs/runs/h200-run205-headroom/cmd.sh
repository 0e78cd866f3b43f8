# Run 205: writescope with its placement headroom (new KV written 0.03 above its share, so that
# the reads may follow r* up): run 203's share sweep again (Qwen3 and DeepSeek at 16 and 32 x
# 32K beside static 0.30-0.55 and monolithic, 3 x 16), the CUDA e2e, and DeepSeek's grid.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g205 --budget-s 270 --archive $OUT/g.tgz --batches 16,32 --contexts 32768 --policies "writescope monolithic static:0.3 static:0.35 static:0.4 static:0.45 static:0.5 static:0.55" qwen3_moe:3:16:170 deepseek_v2:3:16:90 > $OUT/grids.log 2>&1; echo "grids rc=$?"; cat /tmp/g205/sweep-*.txt | grep -E "^batch|best static|writescope|monolithic"
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -2 $OUT/e2e.log
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g205d --budget-s 150 --archive $OUT/gd.tgz deepseek_v2:2:24:130 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A8 "vs the best baseline" /tmp/g205d/report-deepseek_v2.txt | head -8
