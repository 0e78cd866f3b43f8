# Run 263 (session 56): run 262's Qwen3 part again, after its failure (the 32K prompt's ids passed
# the kernel's limit on one argument; generate-kernels.sh now passes them in a file). Qwen3-30B-A3B
# shapes (group 8), 4 layers, a 32768-token prompt, 32 greedy tokens under transfer-all; the plans
# at that length: register kernel 86 splits of 384 tokens, bulk4 32 of 1024, bulk3x2 64 of 512.
# The bundle (run with carry ["dist"]): the one of run 262 (42d7903's binaries).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
SECONDS=0; timeout 300 deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda --out $OUT/gq \
  --prompt 32768 registers bulk4 bulk3x2 > $OUT/run263-qwen3-32k.txt 2>&1
echo "qwen3 32K rc=$? ${SECONDS}s"; grep -v "^prefill" $OUT/run263-qwen3-32k.txt | tail -20
rm -f $OUT/gq/prompt-ids.txt; tar czf $OUT/g263.tgz -C $OUT gq && rm -rf $OUT/gq
