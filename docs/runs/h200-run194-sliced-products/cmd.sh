# Run 194: the split products with the inner dimension in slices of 512 (the logits' whole):
# device_linear_test (with the accuracy test), cuda_logits_test, the CUDA e2e, then
# Mixtral's grid (2 x 16) with the hot experts the freed VRAM holds.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for t in device_linear_test cuda_logits_test; do
  timeout 200 /tmp/ws/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/$t.txt | tr '\n' ' ')"; done
grep -h "rms |error|" $OUT/device_linear_test.txt
WS_E2E_DEVICE=cuda timeout 300 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -2 $OUT/generate-cuda.txt
grep -h "^FAIL\|vs ws_reference: prompt logprobs max" $OUT/generate-cuda.txt | sed 's/over [0-9]* positions.*//'
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g194 --budget-s 345 --archive $OUT/g.tgz mixtral:2:16 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -6 $OUT/grids.log
grep -h "hot experts" /tmp/g194/grid-*.log | head -4
grep -h -A8 "The CPU experts" /tmp/g194/report-*.txt | cut -c1-300
