# Run 190: the greedy grids with the bench's rows starting from distinct tokens (9d0e1f6):
# DeepSeek 3 x 24 and Qwen3 2 x 24 on one lease.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g --budget-s 545 --archive $OUT/g.tgz deepseek_v2:3:24:200 qwen3_moe:2:24 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -12 $OUT/grids.log
grep -h -A8 "The CPU experts" /tmp/g/report-*.txt | cut -c1-400
