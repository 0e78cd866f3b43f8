# Run 203: is writescope's CPU share the step's optimum? Static shares 0.30-0.55 beside
# writescope and monolithic at batch 16 and 32 x 32K (Qwen3 and DeepSeek, 4 layers, one
# runtime, the policies interleaved per point, 3 repeats x 16 steps).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g203 --budget-s 540 --archive $OUT/g.tgz --batches 16,32 --contexts 32768 --policies "writescope monolithic static:0.3 static:0.35 static:0.4 static:0.45 static:0.5 static:0.55" qwen3_moe:3:16:300 deepseek_v2:3:16:200 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -4 $OUT/grids.log
