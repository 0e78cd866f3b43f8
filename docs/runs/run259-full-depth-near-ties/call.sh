# The next lease's call (session 54; not run): run 260's GQA kernel comparison first where the
# lease is an H200 (issue 4's machine; ~30 s), then run 259. The bundle:
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe cuda_attention_test attention_bench" deploy/gpu-bundle.sh
# Environment: TOTAL_S (the call's seconds for the trios, default 540), DS_S (DeepSeek's, 210),
# SKIP_QWEN=1 (DeepSeek only, for a short budget).
export CALL_START=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash docs/runs/h100-run260-gqa-bulk/cmd.sh > $OUT/run261-kernels.txt 2>&1
  grep -E "^(NVIDIA|test rc|bench)|qwen3 +32768 +1 |mixtral +32768 +1 " $OUT/run261-kernels.txt
fi
bash docs/runs/run259-full-depth-near-ties/cmd.sh
