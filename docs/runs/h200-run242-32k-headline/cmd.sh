# Run 242 (session 47): the 1.4x headline point, batch 32 x 32K, writescope against cpu-all and
# transfer-all in one runtime, in turns (up to 3 rounds x 2 turns of 8 steps, 4 warm-up steps before
# a point's second turn): DeepSeek (1.37x over cpu-all in run 238) and Mixtral (1.27x in run
# 239). What was left of the session's device time (474 s).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for spec in deepseek_v2:3:8:70 mixtral:3:8:150; do
  arch=${spec%%:*}; SECONDS=0
  deploy/gpu-grids.sh --one-runtime --turns 2 --turn-warmup 4 --no-probe --out /tmp/g242/$arch --budget-s 180 --batches 32 --contexts 32768 --policies "writescope cpu-all transfer-all" --archive $OUT/g-$arch.tgz $spec > $OUT/grid-$arch.log 2>&1; echo "$arch rc=$? ${SECONDS}s"
  grep "vs the best baseline" /tmp/g242/$arch/report-$arch.txt | head -2
  python3 deploy/best_baseline_report.py /tmp/g242/$arch/bench-$arch.csv | sed -n '/^Paired/,/^Points/p'
done
# Ran in session 47 (2026-12-05 ~05:21 UTC, bundle of run 240; wall 151 s): DeepSeek 32 s,
# Mixtral 116 s, 3 rounds x 2 turns each; the archives unpacked into deepseek_v2/ and mixtral/.
