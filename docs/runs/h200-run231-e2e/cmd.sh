# Run 231 (56242d8's binaries, the e2e of 87a1cbb+): the CUDA e2e, with the pinned trio's check.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 110 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; grep -i "pinned" $OUT/e2e.log; tail -1 $OUT/e2e.log
