# Run 251 (session 51): the MLA decode with 16-row chunks in 3, 4 and 5 stages beside the
# default (32 rows, 2 stages), at 2 CTAs per SM. Session 9's deeper pipelines ran 1 CTA per SM
# (4 warps) and lost 20-40 %, so bytes in flight at full occupancy were never tried; the
# one-wave plans (32K x 4, 128K x 1) take ~3.1 us per 32-row chunk against 2.7 in the
# multi-wave ones, with one chunk ahead per CTA.
# 1. cuda_attention_test's MLA cases (the variants against the fp64 reference).
# 2. attention_bench's CUDA MLA table (c16x3..c16x5 columns), twice.
# Ran in session 51 on the same H100 lease right after run 250, d779ffe, wall 22.5 s.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
SECONDS=0; /tmp/ws/bin/cuda_attention_test --gtest_filter='*Mla*' --gtest_brief=1 > $OUT/mla-test.txt 2>&1; echo "test rc=$? ${SECONDS}s"; tail -3 $OUT/mla-test.txt
for i in a b; do
  SECONDS=0; /tmp/ws/bin/attention_bench --no-cpu --no-gqa --no-merge --no-logits --no-prefill --no-overlap --iters=15 --tokens=8192,32768,131072 --batch=1,4,8,32 > $OUT/mla-bench-$i.txt 2>&1; echo "bench $i rc=$? ${SECONDS}s"
  grep -A20 "CUDA MLA decode" $OUT/mla-bench-$i.txt
done
