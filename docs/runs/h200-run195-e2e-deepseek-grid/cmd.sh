# Run 195: the CUDA e2e with the reference's router margins (positions after a router
# near-tie set aside, counted), step spans, then DeepSeek's grid (3 x 24) with the split
# products and the hot experts the freed VRAM holds.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 300 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -1 $OUT/generate-cuda.txt
grep -h "^FAIL\|vs ws_reference: prompt logprobs max" $OUT/generate-cuda.txt | cut -c1-300
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g195 --budget-s 240 --archive $OUT/g.tgz deepseek_v2:3:24 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -4 $OUT/grids.log
grep -h "hot experts" /tmp/g195/grid-*.log | head -3
grep -h -A8 "The CPU experts" /tmp/g195/report-*.txt | cut -c1-300
