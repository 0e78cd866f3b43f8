# Run 295 (session 66, 2026-12-07): run 294 (H100) had the MLA decode fastest with about one CTA
# per SM (splits of ~tokens / (SMs / batch)) at every point of 2K-32K x batch 1-8 but 32K x 8
# (level), 6-49 % under the planned splits (2 CTAs per SM, splits of at least 256 tokens).
# attention_bench's MLA table with the sm1 column (that plan) at 2K-128K x batch 1-32, to see
# where it stops paying before the rule changes.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
SECONDS=0; timeout 200 /tmp/ws/bin/attention_bench --no-cpu --no-gqa --no-merge --no-logits --no-prefill --no-overlap --no-floors --iters=15 --tokens=2048,8192,32768,65536,131072 --batch=1,2,4,8,16,32 > $OUT/mla.txt 2>&1; echo "mla rc=$? ${SECONDS}s"
grep -A40 "CUDA MLA decode" $OUT/mla.txt | cut -c1-220
