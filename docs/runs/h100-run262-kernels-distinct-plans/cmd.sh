# Run 262 (session 56): the service on each GQA decode kernel where their split plans differ.
# Run 261 (8K prompt, Qwen3) gave the register kernel and bulk4 the same plan (32 splits of 256
# tokens: both rules hit the 256-token minimum at 4 kv heads), so their generations were equal
# to the last bit and could not tell the kernels apart. Here:
# 1. Qwen3-30B-A3B shapes (group 8), 4 layers, a 32768-token prompt (plans at that length):
#    register kernel 86 splits
#    of 384 tokens, bulk4 32 of 1024, bulk3x2 64 of 512 (SplitTokens, 132 SMs);
# 2. Mixtral-8x7B shapes (group 4), 2 layers, an 8192-token prompt: register kernel 32 splits of
#    256, bulk4 16 of 512, bulk3x2 32 of 256 (its rule: 264 resident / 8 pairs = 33 -> 256).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe cuda_attention_test attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
SECONDS=0; timeout 240 deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda --out $OUT/gq \
  --prompt 32768 registers bulk4 bulk3x2 > $OUT/run262-qwen3-32k.txt 2>&1
echo "qwen3 32K rc=$? ${SECONDS}s"; grep -v "^prefill" $OUT/run262-qwen3-32k.txt | tail -20
SECONDS=0; timeout 170 deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda --out $OUT/gm \
  --arch mixtral --layers 2 --prompt 8192 registers bulk4 bulk3x2 > $OUT/run262-mixtral-8k.txt 2>&1
echo "mixtral 8K rc=$? ${SECONDS}s"; grep -v "^prefill" $OUT/run262-mixtral-8k.txt | tail -20
tar czf $OUT/g262.tgz -C $OUT gq gm && rm -rf $OUT/gq $OUT/gm
# Result (session 56, H100): the Mixtral part ran (bulk4 against the register kernel 8.0e-4,
# bulk3x2 to the last bit: the same plan); the Qwen3 part failed before generating (the ids on
# the command line, "Argument list too long"), run again as run 263.
