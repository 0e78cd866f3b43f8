# Run 240 (session 47): the CUDA tests after session 46's mends (the wrapper checks its block
# lists before staging; CUDA tests fail, not skip, on a device that does not start; NaN counts
# as an error), session 47's new cases (a D-window of two blocks for GQA and MLA decode,
# prefill at GQA groups 3 and 16; device_attention_test held to the kernels' 2e-5) and the
# CUDA e2e. The bundle (xz, 15.7 MiB; run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_cpu_load device_attention_test device_linear_test cuda_attention_test \
#     cuda_prefill_test cuda_experts_test device_copy_test" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
check() {  # NAME SECONDS
  timeout $2 /tmp/ws/bin/$1 --gtest_brief=1 > $OUT/$1.txt 2>&1; echo "$1 rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/$1.txt | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" $OUT/$1.txt | head -4; }
for t in device_attention_test device_linear_test cuda_experts_test device_copy_test; do check $t 45; done
WS_E2E_DEVICE=cuda timeout 200 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$?"; tail -2 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
check cuda_attention_test 100; check cuda_prefill_test 90
grep -hE "W2 |window blocks 2|Group3|Group16" $OUT/cuda_attention_test.txt $OUT/cuda_prefill_test.txt | sort -t= -k2 -g | tail -3
cd $OUT && tar czf tests.tgz *.txt && rm -f *.txt
