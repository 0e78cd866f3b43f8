# Run 289 (session 65, 2026-12-07): issue 7's "never below 0.98x" on the H200 (the machine the
# issue names) with this build, at the six grid points that runs 222-239's pooled intervals
# could not tell but ~24-46 rounds at their means would (session 59's reading, best_baseline_
# report.py): Qwen3 16 x 8K (over transfer-all), 4 x 32K and 16 x 32K (monolithic), with 4 x 8K
# (transfer-all) beside them as in run 278; Mixtral 4 and 16 x 32512 (monolithic); DeepSeek 32 x
# 8K (monolithic). writescope / transfer-all / monolithic in turns in one runtime per model (10
# turns of 8 measured steps per bench round, 4 warm-up steps before each later turn), 4 layers.
# The bundle (run with carry ["dist"]; the one of run 288 serves):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench" deploy/gpu-bundle.sh
# Knobs: QR, MR, DR bench rounds per model (10 turns each); QS, MS, DS seconds per model;
# MODELS, the grids to run (default "q m d").
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1; lscpu | grep -E "L3|Model name"
grid() {  # name arch rounds seconds batches contexts
  deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g289$1 --budget-s $(($4 + 10)) --archive $OUT/g$1.tgz --batches $5 --contexts $6 --policies "writescope transfer-all monolithic" $2:$3:8:$4 > $OUT/grids-$1.log 2>&1; echo "$1 rc=$? $(($(date +%s) - CALL_START))s"
  python3 deploy/best_baseline_report.py /tmp/g289$1/bench-$2.csv | sed -n '/^Against one best/,$p' | grep -E "over (transfer-all|monolithic|cpu-all|static)" | grep -v "time over" | cut -c1-160
}
[[ ${MODELS:-q m d} == *q* ]] && grid q qwen3_moe ${QR:-3} ${QS:-190} 4,16 8192,32768
[[ ${MODELS:-q m d} == *m* ]] && grid m mixtral ${MR:-3} ${MS:-210} 4,16 32768
[[ ${MODELS:-q m d} == *d* ]] && grid d deepseek_v2 ${DR:-3} ${DS:-90} 32 8192
echo "call $(($(date +%s) - CALL_START))s"
