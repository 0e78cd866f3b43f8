# Run 198: the re-read mends of CudaLinear (the scratch bytes an atomic, comments) on the H200:
# device_linear_test and the CUDA e2e.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
timeout 100 /tmp/ws/bin/device_linear_test --gtest_brief=1 > $OUT/device_linear_test.txt 2>&1; echo "device_linear_test rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/device_linear_test.txt | tr '\n' ' ')"
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -1 $OUT/generate-cuda.txt; grep -h "^FAIL" $OUT/generate-cuda.txt | cut -c1-200
