# Run 264 (session 56): bulk4 as the service's default GQA decode kernel (uncommitted tree on
# 42d7903, then committed as the switch).
# 1. cuda_attention_test's GQA, merge and decode cases (the register kernel now named in its
#    variants, the default once);
# 2. attention_bench's GQA tables once (the ms column now names the register kernel);
# 3. the service with no flag against bulk4 named: Qwen3 shapes, 4 layers, a 32768-token prompt,
#    32 greedy tokens (the default must give bulk4's generation; run 263 has the others).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope \
#     cuda_attention_test attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
SECONDS=0; timeout 200 /tmp/ws/bin/cuda_attention_test --gtest_filter='*Gqa*:*Merge*:*GpuDecode*' --gtest_brief=1 > $OUT/gqa-test.txt 2>&1; echo "test rc=$? ${SECONDS}s"; tail -4 $OUT/gqa-test.txt; grep -m5 -B2 -A6 "Failure" $OUT/gqa-test.txt | cut -c1-200
SECONDS=0; timeout 120 /tmp/ws/bin/attention_bench --no-cpu --no-mla --no-merge --no-logits --no-prefill --no-overlap --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/gqa-bench.txt 2>&1; echo "bench rc=$? ${SECONDS}s"
grep -A24 "CUDA GQA decode: ping" $OUT/gqa-bench.txt; grep -A10 "where the time goes" $OUT/gqa-bench.txt
SECONDS=0; timeout 150 deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda --out $OUT/gd \
  --prompt 32768 default bulk4 > $OUT/generate-default.txt 2>&1
echo "generate rc=$? ${SECONDS}s"; grep -v "^prefill" $OUT/generate-default.txt | tail -12
rm -f $OUT/gd/prompt-ids.txt; tar czf $OUT/g264.tgz -C $OUT gd && rm -rf $OUT/gd
