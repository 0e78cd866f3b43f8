# The next lease's call (sessions 54-55; not run): where the lease is an H200 (issue 4's
# machine), run 260's GQA kernel comparison (~30 s) and the service on the register and bulk4
# kernels (deploy/generate-kernels.sh: a synthetic Qwen3 of 4 layers, an 8K prompt, 32 greedy
# tokens compared; ~90 s); then run 259 in what is left. The bundle:
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe cuda_attention_test attention_bench" deploy/gpu-bundle.sh
# Environment: TOTAL_S (the call's seconds for all of it, default 540), DS_S (DeepSeek's, 210),
# SKIP_QWEN=1 (DeepSeek only, for a short budget), KERNELS=1 (the kernel checks on any GPU).
export CALL_START=$(date +%s)
if [[ -n ${KERNELS:-} ]] || nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash docs/runs/run261-kernels/cmd.sh  # the kernel checks (~150 s)
fi
bash docs/runs/run259-full-depth-near-ties/cmd.sh
