# Ran in session 56 on an H100 80GB HBM3 (478 s; not an H200 and KERNELS unset, so run 259
# alone; the kernel checks ran apart, run 261). Written in sessions 54-55 as the next lease's call: where the lease is an H200 (issue 4's
# machine), run 260's GQA kernel comparison (~30 s) and the service on the register and bulk4
# kernels (deploy/generate-kernels.sh: a synthetic Qwen3 of 4 layers, an 8K prompt, 32 greedy
# tokens compared; ~90 s); then run 259 in what is left. The bundle:
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe cuda_attention_test attention_bench" deploy/gpu-bundle.sh
# Environment: TOTAL_S (the call's seconds for all of it, default 540), DS_S (DeepSeek's, 210),
# SKIP_QWEN=1 (DeepSeek only, for a short budget), KERNELS=1 (the kernel checks on any GPU).
export CALL_START=$(date +%s)
if [[ -n ${KERNELS:-} ]] || nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash docs/runs/h100-run261-kernels/cmd.sh  # the kernel checks (~150 s)
fi
bash docs/runs/h100-run259-full-depth-near-ties/cmd.sh
