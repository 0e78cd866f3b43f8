# Run 306 (session 69, 2026-12-07): issue 4's GPU tables (run 301's) with the L2 flush's loads
# cached, the default since run 305 showed that the streaming flush left lines of the call
# before: GQA (with the batch-1 anatomy and its timeline, and bulk4 at fixed split sizes) and
# MLA at 8K, 32K and 128K x 1, 4 and 32; on an H200, the floors first. Then
# cuda_attention_test (CheckGqa through GqaDecodeInputs) and the CUDA e2e and launch_test.sh on
# this session's code (the last CUDA e2e ran on session 66's, run 293).
# The bundle (carry ["dist"]): WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope
#   ws_reference ws_probe attention_bench cuda_attention_test" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
floors=--no-floors; [[ $gpu == *H200* ]] && floors=
SECONDS=0; timeout 300 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap $floors --gqa-splits --timeline --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/tables.txt 2>&1; echo "tables rc=$? ${SECONDS}s"
grep -E -A12 "where the time goes|on a timeline|CUDA MLA decode" $OUT/tables.txt | cut -c1-250 | head -60
grep -E -A14 "^model +tokens +batch" $OUT/tables.txt | cut -c1-110
SECONDS=0; timeout 60 /tmp/ws/bin/cuda_attention_test > $OUT/cuda_attention_test.txt 2>&1; echo "cuda_attention_test rc=$? ${SECONDS}s"; tail -1 $OUT/cuda_attention_test.txt
export WS_BIN=/tmp/ws/bin
if [[ ${E2E:-1} == 1 ]]; then  # E2E=0: the tables and cuda_attention_test only
WS_E2E_DEVICE=cuda timeout 200 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
WS_E2E_DEVICE=cuda timeout 90 bash tests/e2e/launch_test.sh "$PWD" /tmp/ws/bin > $OUT/launch-cuda.txt 2>&1; echo "launch_test rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/launch-cuda.txt; grep "^FAIL" $OUT/launch-cuda.txt | head -5
fi
echo "call $(($(date +%s) - CALL_START))s"
