# Run 252 (session 51; asked for an H200, ran on an H100 80GB HBM3, d832867, wall 231 s):
# the CUDA e2e on the session's final code (not run since the cap on forced split explorations,
# 35cb86a), then the two other near-tie points of runs 246-247,
# Qwen3 4 x 8K and Mixtral 16 x 8K, one trio each with the cap (the default): writescope /
# transfer-all / monolithic in one runtime, 3 rounds x 10 turns of 8 steps, read with
# best_baseline_report.py's interval and where writescope's time went by kind of step.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe" deploy/gpu-bundle.sh
CALL_START=$(date +%s); deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
WS_E2E_DEVICE=cuda timeout 200 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$? $(($(date +%s) - CALL_START))s"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
for spec in qwen3_moe:4:100 mixtral:16:230; do a=${spec%%:*}; rest=${spec#*:}; b=${rest%%:*}; budget=${rest#*:}
  [[ $(($(date +%s) - CALL_START + budget)) -gt 580 ]] && { echo "$a skipped (time)"; continue; }
  SECONDS=0; deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g252/$a --budget-s $budget --batches $b --contexts 8192 --policies "writescope transfer-all monolithic" --archive $OUT/g-$a.tgz $a:3:8:$((budget - 10)) > $OUT/grid-$a.log 2>&1; echo "$a rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g252/$a/bench-$a.csv | sed -n '/^Against one/,/^writescope over the point/p' | tail -n +2 | cut -c1-330
done
