# Run 293 (session 66, 2026-12-07): issue 4's batch-1 fixed cost, the sequence lists carried in
# the decode kernels' parameters (ef36006: GpuKvSource::host, launches of <= 4 sequences).
# 1. cuda_attention_test whole (the host-list variants against the fp64 reference, and the test
#    that the inline lists are read up to 4 sequences and not past them).
# 2. attention_bench's GQA batch-1 anatomy (bulk4 / b4_window against b4_inl / b4w_inl) and the
#    MLA table at batch 1 and 4 (ms against inline), twice; the floors on an H200 only.
# 3. The CUDA e2e (the gpu_worker passes its lists' host copies).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench cuda_attention_test" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
SECONDS=0; timeout 200 /tmp/ws/bin/cuda_attention_test --gtest_brief=1 > $OUT/test.txt 2>&1; echo "test rc=$? ${SECONDS}s"; tail -3 $OUT/test.txt; grep -m5 -B2 -A6 "Failure" $OUT/test.txt | cut -c1-200; gzip -9 $OUT/test.txt
floors=--no-floors; [[ $gpu == *H200* ]] && floors=
for i in a b; do
  SECONDS=0; timeout 120 /tmp/ws/bin/attention_bench --no-cpu --no-merge --no-logits --no-prefill --no-overlap $floors --iters=15 --tokens=8192,32768,131072 --batch=1,4 > $OUT/bench-$i.txt 2>&1; echo "bench $i rc=$? ${SECONDS}s"; floors=--no-floors
  grep -A8 "where the time goes" $OUT/bench-$i.txt | cut -c1-200; grep -A10 "CUDA MLA decode" $OUT/bench-$i.txt | cut -c1-200
done
WS_E2E_DEVICE=cuda timeout 240 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
echo "call $(($(date +%s) - CALL_START))s"
