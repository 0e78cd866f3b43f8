# Ran in session 56 on an H100 80GB HBM3 through call.sh (DeepSeek 191 s, Qwen3 285 s): ds27/, qw48/,
# ds27.log, qw48.log. Not run in sessions 53-55 (no lease came for it).
# Run 259 (session 53): the two points where "never below 0.98x the best baseline" could not be
# told with 4 layers (DeepSeek 4 x 8K, Qwen3 4 x 8K; runs 254-256), at the models' full depth:
# DeepSeek-V2-Lite's 27 layers and Qwen3-30B-A3B's 48. With 4 layers, a step's fixed costs
# (logits, sampling, the step's first two KV rounds, which the previous step queues early) and
# the host's slow steps weigh ~7-12x what they do in the whole model. writescope, transfer-all
# and monolithic in one runtime, turns of 8 steps, as many rounds as the time allows.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe" deploy/gpu-bundle.sh
CALL_START=${CALL_START:-$(date +%s)}; deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
mkdir -p /tmp/g259
trio() {  # NAME ARCH LAYERS SECONDS
  local run=$1 arch=$2 layers=$3 secs=$4
  SECONDS=0; deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g259/$run --budget-s $((secs + 20)) --layers $layers --batches 4 --contexts 8192 --policies "writescope transfer-all monolithic" $arch:30:8:$secs > /tmp/g259/$run.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  grep -E "serving|left out|ready in" /tmp/g259/$run/grid-$arch.log | head -3 | cut -c1-200
  python3 deploy/best_baseline_report.py /tmp/g259/$run/bench-$arch.csv | grep -E "over transfer-all|over monolithic|time over|of .* points" | cut -c1-250
  python3 deploy/modes_report.py /tmp/g259/$run/steps-$arch.csv | grep "^explorations of" | cut -c1-200
  grep -E "^(writescope|transfer-all|monolithic) " /tmp/g259/$run/report-$arch.txt | head -6 | cut -c1-200
  gzip /tmp/g259/$run/steps-*.csv /tmp/g259/$run/warmup-*.csv 2>/dev/null
  tar czf $OUT/g259.tgz -C /tmp g259  # what has run so far, should the call be cut
}
trio ds27 deepseek_v2 27 ${DS_S:-210}
[[ -n ${SKIP_QWEN:-} ]] || trio qw48 qwen3_moe 48 $((${TOTAL_S:-540} - ($(date +%s) - CALL_START) - 30))
free -g | head -2
echo "call $(($(date +%s) - CALL_START))s"
