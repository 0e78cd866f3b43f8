# Run 269 (prepared in session 56; run in session 57, 2026-12-06, on an NVIDIA H200, 459 s).
# cuda_attention_test was left out of the bundle: with it the call passed the 64 MB it may
# carry, so part 1's test line reads rc=127. Results: docs/measurements.md "Session 57".
# 1. On an H200 (issue 4's machine) only: run 260's comparison of the GQA decode kernels
#    (cuda_attention_test's GQA cases, attention_bench's GQA tables twice), now that bulk4 is
#    the default (session 56: faster on an H100 at 14-15 of 17 points, never timed on an
#    H200), then the service on each kernel at Qwen3 32K (generate-kernels.sh, the routed
#    experts on the CPU so that the trios repeat; runs 263, 267).
# 2. On any GPU: run 259's DeepSeek point again (27 layers, 4 x 8K, writescope / transfer-all /
#    monolithic in turns), so that its rounds can be pooled with run 259's 110
#    (deploy/best_baseline_report.py over both CSVs): 0.975 [0.955, 0.994] wants ~1400.
# The bundle (run with carry ["dist"]; the tree is near the 64 MiB the run takes):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope \
#     attention_bench" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
export CALL_START=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash docs/runs/h100-run260-gqa-bulk/cmd.sh > $OUT/run269-kernels.txt 2>&1
  grep -E "^(NVIDIA|test rc|bench)|qwen3 +32768 +1 |mixtral +32768 +1 " $OUT/run269-kernels.txt
  SECONDS=0; timeout 150 deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda --out $OUT/gq \
    --prompt 32768 registers bulk4 bulk3x2 > $OUT/run269-generate.txt 2>&1
  echo "generate rc=$? ${SECONDS}s"; grep -v "^prefill" $OUT/run269-generate.txt | tail -12
  rm -f $OUT/gq/prompt-ids.txt; tar czf $OUT/gq.tgz -C $OUT gq && rm -rf $OUT/gq
fi
# Run 259's DeepSeek trio in what is left (its files in $OUT/g259.tgz).
left=$(( ${TOTAL_S:-540} - ($(date +%s) - CALL_START) - 60 ))
SKIP_QWEN=1 DS_S=$(( left < 400 ? left : 400 )) bash docs/runs/h100-run259-full-depth-near-ties/cmd.sh
