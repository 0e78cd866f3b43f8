# Run 290 (session 65, 2026-12-07; run in session 66 as run 292 on an H100, no floors: see
# docs/runs/h100-run292-deepseek-32x8k/): on an H200 first issue 4's batch-1 floors (session 60's
# table, ~10 s, never run on an H200), then issue 7's DeepSeek 32 x 8K point again (run 289 on
# an H100: writescope 0.960 [0.922, 1.001] of monolithic over 50 rounds, cannot tell, ~202
# rounds needed), DR bench rounds of 10 turns in DS seconds.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench" deploy/gpu-bundle.sh
# Run as: DR=16 DS=420 bash docs/runs/run290-deepseek-32x8k/cmd.sh
deploy/gpu-run.sh --unpack-only >/dev/null
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if [[ $gpu == *H200* || -n ${FLOORS:-} ]]; then
  SECONDS=0; LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 /tmp/ws/run.sh attention_bench --no-cpu --no-mla --no-gqa --no-merge --no-logits --tokens=8192,32768,131072 --iters=15 > $OUT/floors.txt 2>&1; echo "floors rc=$? ${SECONDS}s"; cut -c1-250 $OUT/floors.txt
  DS=$(( ${DS:-420} - SECONDS ))
fi
MODELS=d DR=${DR:-16} DS=${DS:-420} bash docs/runs/run289-h200-points/cmd.sh
