# Run 254 (prepared in session 51, not run: no H200 could be started at the end): the CUDA
# e2e on the session's final code on the H200 kind (run 252 ran it on an H100), then Qwen3 4 x
# 8K with the cap, one trio (writescope / transfer-all /
# monolithic, 3 rounds x 10 turns of 8 steps), read with where writescope's time went.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
WS_E2E_DEVICE=cuda timeout 200 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
SECONDS=0; deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g254/qwen3_moe --budget-s 100 --batches 4 --contexts 8192 --policies "writescope transfer-all monolithic" --archive $OUT/g-qwen3_moe.tgz qwen3_moe:3:8:90 > $OUT/grid-qwen3_moe.log 2>&1; echo "qwen3_moe rc=$? ${SECONDS}s"
python3 deploy/best_baseline_report.py /tmp/g254/qwen3_moe/bench-qwen3_moe.csv | sed -n '/^Against one/,/^writescope over the point/p' | tail -n +2 | cut -c1-330
