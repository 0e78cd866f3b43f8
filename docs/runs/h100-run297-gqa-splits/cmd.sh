# Run 297 (session 66, 2026-12-07): run 295 had the MLA decode up to 48 % faster at short
# contexts with short splits (one CTA per SM, below the 256-token minimum). The same question for
# the service's GQA kernel (bulk4: one CTA per SM already, splits of at least 256 tokens): the
# new --gqa-splits table (bulk4 planned against fixed splits of 64-2048 tokens), Qwen3 and
# Mixtral at 2K-32K x batch 1-8.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
SECONDS=0; timeout 200 /tmp/ws/bin/attention_bench --no-cpu --no-mla --no-merge --no-logits --no-prefill --no-overlap --no-floors --gqa-splits --iters=15 --tokens=2048,4096,8192,32768 --batch=1,2,4,8 --models=qwen3,mixtral > $OUT/gqa.txt 2>&1; echo "gqa rc=$? ${SECONDS}s"
grep -A40 "bulk4 at fixed split" $OUT/gqa.txt | cut -c1-200
