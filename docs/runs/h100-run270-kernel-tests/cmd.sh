# Run 270 (session 57, 2026-12-06; an H100 80GB HBM3 came, 178 s): issue 4's kernels on the
# current commit (d3e3dc6's code), on whichever GPU came. Results: docs/measurements.md
# "Session 57"; tests.txt.gz (642 tests, all passed), attention.txt, gqa8k-*.txt.
# 1. The four CUDA test programs, whole (deploy/gpu-run.sh --all-tests): every kernel against
#    its reference, bulk4 the GQA default since session 56 (run 264 ran the GQA cases only,
#    on an H100).
# 2. attention_bench with every table (CPU decode, GPU decode, MLA, merges, prefill, overlap),
#    as deploy/gpu-measure.sh's "attention" step runs it.
# 3. The CUDA GQA table at Qwen3 8K for batches 8, 16, 32 twice: run 269 (H200) had bulk4
#    7.8 % slower than the register kernel at Qwen3 8K x 32, the one point it lost by more
#    than 1.3 %.
# The bundle (9.9 MB; the tree is near what a call may carry):
#   rm -rf dist && WS_BUNDLE_BINARIES="cuda_attention_test cuda_prefill_test cuda_logits_test \
#     cuda_experts_test attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
SECONDS=0; timeout 240 deploy/gpu-run.sh --all-tests > $OUT/tests.txt 2>&1; echo "tests rc=$? ${SECONDS}s"
grep -E "PASSED|FAILED|passed|failed|skipped" $OUT/tests.txt | tail -12
SECONDS=0; timeout 240 /tmp/ws/bin/attention_bench --threads="$(nproc)" --iters=3 > $OUT/attention.txt 2>&1
echo "attention rc=$? ${SECONDS}s"; grep -E "^==" $OUT/attention.txt | head -40
for i in a b; do
  SECONDS=0; timeout 60 /tmp/ws/bin/attention_bench --no-cpu --no-mla --no-merge --no-logits --no-prefill --no-overlap --iters=15 --tokens=8192 --batch=8,16,32 > $OUT/gqa8k-$i.txt 2>&1
  echo "gqa8k $i rc=$? ${SECONDS}s"; grep -A8 "CUDA GQA decode: ping" $OUT/gqa8k-$i.txt | grep -E "^(model|qwen3|mixtral)"
done
gzip -9 $OUT/tests.txt
