# Run 296 (session 66, 2026-12-07): the MLA split rule with one CTA per SM where its splits are
# short (b112151), checked: cuda_attention_test whole (the planned MLA cases now plan 32-1024
# token splits), the MLA table at run 295's points (the planned ms column should now match sm1
# wherever sm1's splits are <= 1024 tokens, and stay where they are longer), the CUDA e2e.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench cuda_attention_test" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
SECONDS=0; timeout 200 /tmp/ws/bin/cuda_attention_test --gtest_brief=1 > $OUT/test.txt 2>&1; echo "test rc=$? ${SECONDS}s"; tail -2 $OUT/test.txt; grep -m5 -B2 -A6 "Failure" $OUT/test.txt | cut -c1-200; gzip -9 $OUT/test.txt
SECONDS=0; timeout 200 /tmp/ws/bin/attention_bench --no-cpu --no-gqa --no-merge --no-logits --no-prefill --no-overlap --no-floors --iters=15 --tokens=2048,8192,32768,65536,131072 --batch=1,2,4,8,16,32 > $OUT/mla.txt 2>&1; echo "mla rc=$? ${SECONDS}s"
grep -A40 "CUDA MLA decode" $OUT/mla.txt | cut -c1-220
WS_E2E_DEVICE=cuda timeout 240 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
echo "call $(($(date +%s) - CALL_START))s"
