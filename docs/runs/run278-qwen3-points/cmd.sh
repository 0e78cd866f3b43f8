# Run 278 (session 59, 2026-12-06): issue 7's "never below 0.98x" at the Qwen3 grid points
# (4 layers) whose pooled intervals over runs 222-239 could not tell but would with ~30-46
# rounds at their means (best_baseline_report.py: 16 x 8K 1.024 over transfer-all, ~30; 4 x 32K
# 1.025 and 16 x 32K 1.014 over monolithic, ~34 and ~46), and 4 x 8K (0.973 over
# transfer-all, ~364), writescope / transfer-all / monolithic in turns in one runtime (10
# turns of 8 measured steps per point and policy, 4 warm-up steps before each later turn).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_cpu_load" \
#     deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1; lscpu | grep -E "L3|Model name"
secs=$(( ${TOTAL_S:-560} - 60 ))
deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out ${GRID_OUT:-/tmp/g278} --budget-s $((secs + 20)) --archive $OUT/g.tgz --batches ${BATCHES:-4,16} --contexts ${CONTEXTS:-8192,32768} --policies "writescope transfer-all monolithic" qwen3_moe:${REPEATS:-3}:8:$secs > $OUT/grids.log 2>&1; echo "grids rc=$?"
python3 deploy/best_baseline_report.py ${GRID_OUT:-/tmp/g278}/bench-qwen3_moe.csv | sed -n '/^Paired/,$p' | grep -E "over|writescope over" | cut -c1-200
echo "call $(($(date +%s) - CALL_START))s"
