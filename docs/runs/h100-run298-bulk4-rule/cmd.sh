# Run 298 (session 66, 2026-12-07): bulk4's rule with splits below 256 tokens where the minimum
# left SMs idle (run 297), checked: cuda_attention_test whole, the --gqa-splits table (the
# planned column should now match s64 / s128 at Qwen3 2K x 1-2, 4K x 1 and Mixtral 2K x 1), and the
# CUDA e2e.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench cuda_attention_test" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
SECONDS=0; timeout 200 /tmp/ws/bin/cuda_attention_test --gtest_brief=1 > $OUT/test.txt 2>&1; echo "test rc=$? ${SECONDS}s"; tail -2 $OUT/test.txt; grep -m5 -B2 -A6 "Failure" $OUT/test.txt | cut -c1-200; gzip -9 $OUT/test.txt
SECONDS=0; timeout 200 /tmp/ws/bin/attention_bench --no-cpu --no-mla --no-merge --no-logits --no-prefill --no-overlap --no-floors --gqa-splits --iters=15 --tokens=2048,4096,8192,32768 --batch=1,2,4,8 --models=qwen3,mixtral > $OUT/gqa.txt 2>&1; echo "gqa rc=$? ${SECONDS}s"
grep -A40 "bulk4 at fixed split" $OUT/gqa.txt | cut -c1-200
WS_E2E_DEVICE=cuda timeout 240 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
echo "call $(($(date +%s) - CALL_START))s"
