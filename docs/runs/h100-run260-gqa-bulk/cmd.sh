# Run 260 (session 54): the GQA decode with K/V staged by bulk copies (cp.async.bulk into a
# shared-memory ring, a producer warp, mbarriers; kGqaBulk4 and kGqaBulk3x2) beside the kept
# register kernel. Session 34: Qwen3 32K x 1 takes 26.4 us where 70 % of 4300 GB/s needs 22.3;
# the kernel alone 21.9 us under ncu against a plain read's 17.9, its warps waiting on loads.
# 1. cuda_attention_test's GQA cases (every kernel against the fp64 reference).
# 2. attention_bench's CUDA GQA tables (the bulk4 / bulk3x2 columns), twice.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
SECONDS=0; timeout 240 /tmp/ws/bin/cuda_attention_test --gtest_filter='*Gqa*:*Merge*:*GpuDecode*' --gtest_brief=1 > $OUT/gqa-test.txt 2>&1; echo "test rc=$? ${SECONDS}s"; tail -4 $OUT/gqa-test.txt; grep -m5 -B2 -A6 "Failure" $OUT/gqa-test.txt | cut -c1-200
for i in a b; do
  SECONDS=0; timeout 150 /tmp/ws/bin/attention_bench --no-cpu --no-mla --no-merge --no-logits --no-prefill --no-overlap --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/gqa-bench-$i.txt 2>&1; echo "bench $i rc=$? ${SECONDS}s"
  grep -A30 "CUDA GQA decode: ping" $OUT/gqa-bench-$i.txt | head -24
done
grep -A10 "where the time goes" $OUT/gqa-bench-a.txt
