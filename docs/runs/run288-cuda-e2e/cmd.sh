# Run 288 (session 64, 2026-12-07): the CUDA e2e on session 64's code (the scheduler's
# rest_rise rule and its exploring reason in /metrics), then launch_test.sh on the CUDA
# device, then, on an H200 only, issue 4's batch-1 floors (session 60's table, never on an H200).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
WS_E2E_DEVICE=cuda timeout 240 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5; grep -E "abort: wscope profile" $OUT/e2e-cuda.txt
WS_E2E_DEVICE=cuda timeout 120 bash tests/e2e/launch_test.sh "$PWD" /tmp/ws/bin > $OUT/launch-cuda.txt 2>&1; echo "launch_test rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/launch-cuda.txt; grep "^FAIL" $OUT/launch-cuda.txt | head -5
if [[ $gpu == *H200* || -n ${FLOORS:-} ]]; then
  SECONDS=0; /tmp/ws/run.sh attention_bench --no-cpu --no-mla --no-gqa --no-merge --no-logits --tokens=8192,32768,131072 --iters=15 > $OUT/floors.txt 2>&1; echo "floors rc=$? ${SECONDS}s"; cut -c1-250 $OUT/floors.txt
fi
echo "call $(($(date +%s) - CALL_START))s"
