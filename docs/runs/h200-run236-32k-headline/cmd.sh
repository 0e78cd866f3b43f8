# Run 236 (f6a6cf3): the 1.4x headline point again, batch 32 x 32K, writescope against cpu-all
# and transfer-all in one runtime. Qwen3 first (2 rounds of 16 steps; it also warms the fresh
# lease, whose first trio runs slow for ~10-20 s: runs 225-226), then Mixtral (3 rounds of 16
# steps; run 234's grid ran out of its budget before writescope's second round there).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for spec in qwen3_moe:2:16:100 mixtral:3:16:230; do
  arch=${spec%%:*}; SECONDS=0
  deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g236/$arch --budget-s 240 --batches 32 --contexts 32768 --policies "writescope cpu-all transfer-all" --archive $OUT/g-$arch.tgz $spec > $OUT/grid-$arch.log 2>&1; echo "$arch rc=$? ${SECONDS}s"
  grep -E "^(writescope|cpu-all|transfer-all) " /tmp/g236/$arch/grid-$arch.log | cut -c1-130; grep "vs the best baseline" /tmp/g236/$arch/report-$arch.txt | head -2
done
