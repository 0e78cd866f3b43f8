# Run 294 (session 66, 2026-12-07): the MLA decode's split sizes at short contexts and small
# batches. Run 293 (H100) had MLA 8K x 1 at 21.8 us planned (256-token splits, the rule's
# minimum: 32 CTAs on 132 SMs) against 15.8 us with 128-token splits (run 53 on the H200: 28 %).
# attention_bench's MLA table (s32 .. s2048 columns, the inline lists at batch <= 4) at 2K-32K x
# batch 1, 2, 4, 8, twice, and the GQA batch-1 anatomy at 8K and 32K (the inline lists' A/B again).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
for i in a b; do
  SECONDS=0; timeout 150 /tmp/ws/bin/attention_bench --no-cpu --no-gqa --no-merge --no-logits --no-prefill --no-overlap --no-floors --iters=15 --tokens=2048,4096,8192,16384,32768 --batch=1,2,4,8 > $OUT/mla-$i.txt 2>&1; echo "mla $i rc=$? ${SECONDS}s"
  grep -A26 "CUDA MLA decode" $OUT/mla-$i.txt | cut -c1-200
done
SECONDS=0; timeout 100 /tmp/ws/bin/attention_bench --no-cpu --no-mla --no-merge --no-logits --no-prefill --no-overlap --no-floors --iters=15 --tokens=8192,32768 --batch=1 > $OUT/gqa.txt 2>&1; echo "gqa rc=$? ${SECONDS}s"; grep -A8 "where the time goes" $OUT/gqa.txt | cut -c1-200
