# Run 246 (session 50; ran on an H100, kind nvidia-h100-x1, after three H200 starts failed): the CUDA e2e after session 50's KvCache mends (a failed copy while an early
# round is completed drops the early rounds; a marker reset forgets the pending early rounds'
# markers), then the two grid points nearest to a decision below 0.98 by best_baseline_report.py's
# new interval over the rounds (runs 222-239: Qwen3 4 x 8K 0.973 [0.928, 1.019] over 12 rounds,
# DeepSeek 4 x 8K 0.980 [0.934, 1.028], both against transfer-all), 3 rounds x 10 turns of 8
# steps each, writescope, transfer-all and monolithic (the report needs two baselines).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e-cuda.txt; grep "^FAIL" $OUT/e2e-cuda.txt | head -5
for a in qwen3_moe deepseek_v2; do SECONDS=0
  deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g246/$a --budget-s 190 --batches 4 --contexts 8192 --policies "writescope transfer-all monolithic" --archive $OUT/g-$a.tgz $a:3:8:180 > $OUT/grid-$a.log 2>&1; echo "$a rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g246/$a/bench-$a.csv | sed -n '/^Against one/,$p'
done
# Ran 2026-12-05 ~13:05 UTC on c4500c7 (wall 152 s). The grids' archives are extracted into
# qwen3_moe/ and deepseek_v2/ (steps and warm-up CSVs gzipped).
