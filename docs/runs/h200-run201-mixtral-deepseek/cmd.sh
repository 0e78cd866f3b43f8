# Run 201: the grids with the monolithic baseline that moves its KV (59a1d3a): Mixtral
# (2 x 16) and DeepSeek again (2 x 24; run 200's DeepSeek rounds 1-2 ran on a CPU ~2x slower).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g201 --budget-s 400 --archive $OUT/g.tgz mixtral:2:16:310 deepseek_v2:2:24:90 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -3 $OUT/grids.log
