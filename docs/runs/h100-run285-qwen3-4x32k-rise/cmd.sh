# Run 285 (session 64, 2026-12-07): on an H200 only (or FLOORS=1), first issue 4's batch-1
# floors (session 60's table, ~10 s, never run on an H200); then issue 7's "never below 0.98x"
# at Qwen3 4 x 32K (4 layers) with the scheduler's rest_rise rule (cd22777): run 283's setting
# (500 paired rounds of writescope / transfer-all / monolithic in one runtime), whose deficit
# against monolithic was GPU-only spells after slow split steps.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_cpu_load \
#     attention_bench" deploy/gpu-bundle.sh
# Run as: BATCHES=4 CONTEXTS=32768 REPEATS=50 TOTAL_S=540 GRID_OUT=/tmp/g285 \
#   bash docs/runs/h100-run285-qwen3-4x32k-rise/cmd.sh
deploy/gpu-run.sh --unpack-only >/dev/null
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if [[ $gpu == *H200* || -n ${FLOORS:-} ]]; then
  SECONDS=0; LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 /tmp/ws/run.sh attention_bench --no-cpu --no-mla --no-gqa --no-merge --no-logits --tokens=8192,32768,131072 --iters=15 > $OUT/floors.txt 2>&1; echo "floors rc=$? ${SECONDS}s"; cut -c1-250 $OUT/floors.txt
fi
bash docs/runs/run278-qwen3-points/cmd.sh
