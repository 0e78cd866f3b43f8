# Run 247 (session 50, the same H100 lease right after run 246): DeepSeek at 4 and 16 x 8K again and
# Mixtral 16 x 8K, 3 rounds x 10 turns of 8 steps, writescope / transfer-all / monolithic.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for spec in deepseek_v2:4,16 mixtral:16; do a=${spec%%:*}; SECONDS=0
  deploy/gpu-grids.sh --one-runtime --turns 10 --turn-warmup 4 --no-probe --out /tmp/g247/$a --budget-s 250 --batches ${spec#*:} --contexts 8192 --policies "writescope transfer-all monolithic" --archive $OUT/g-$a.tgz $a:3:8:240 > $OUT/grid-$a.log 2>&1; echo "$a rc=$? ${SECONDS}s"
  python3 deploy/best_baseline_report.py /tmp/g247/$a/bench-$a.csv | sed -n '/^Against one/,$p'
done
# Ran right after run 246 on the same H100 lease (wall 204 s), c4500c7.
