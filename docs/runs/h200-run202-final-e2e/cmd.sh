# Run 202: the CUDA e2e on the session's last code (the parallel re-split copies, the byte
# count removed).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 110 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -1 $OUT/generate-cuda.txt; grep -h "re-splits\|policies:\|FAIL" $OUT/generate-cuda.txt | cut -c1-200
