# Run 240 (session 46, c2e7a8a): the CUDA tests after the audit's mends (the wrapper checks its
# block lists before staging; CUDA tests fail, not skip, on a device that does not start; NaN
# counts as an error) and the CUDA e2e. Prepared in session 46, not yet run (no machine could be
# started). The bundle, beside the 35.5 MB tree within 64 MiB:
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_cpu_load device_attention_test device_linear_test cuda_experts_test device_copy_test" \
#     deploy/gpu-bundle.sh      # 27.1 MiB; run with carry ["dist"]
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for t in device_attention_test device_linear_test cuda_experts_test device_copy_test; do
  timeout 150 /tmp/ws/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/$t.txt | tr '\n' ' ')"; done
WS_E2E_DEVICE=cuda timeout 200 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$?"; tail -2 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
cd $OUT && tar czf tests.tgz *.txt && rm -f *.txt
