# Run 261 (session 55; ran in session 56 on an H100 80GB HBM3: step 2 only, 15 s;
# run261-generate-kernels.txt, gk/): the kernel checks alone, for a lease too short for run 259.
# 1. On an H200 (issue 4's machine) only: run 260's comparison of the GQA decode kernels
#    (cuda_attention_test's GQA cases, attention_bench's GQA tables twice).
# 2. On any GPU: the service on the register kernel and bulk4 (deploy/generate-kernels.sh:
#    a synthetic Qwen3-30B-A3B of 4 layers, an 8192-token prompt, 32 greedy tokens under
#    transfer-all, compared token by token).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe cuda_attention_test attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash docs/runs/h100-run260-gqa-bulk/cmd.sh > $OUT/run261-kernels.txt 2>&1
  grep -E "^(NVIDIA|test rc|bench)|qwen3 +32768 +1 |mixtral +32768 +1 " $OUT/run261-kernels.txt
fi
SECONDS=0; timeout 200 deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda --out $OUT/gk \
  registers bulk4 > $OUT/run261-generate-kernels.txt 2>&1
echo "generate-kernels rc=$? ${SECONDS}s"; cat $OUT/run261-generate-kernels.txt
tar czf $OUT/gk.tgz -C $OUT gk && rm -rf $OUT/gk
