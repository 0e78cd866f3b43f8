# Run 212 (f5336a3's bundle): is writescope's 4-6 % behind transfer-all at DeepSeek 4 x 8K
# (runs 208 and 210) real? One point, writescope, transfer-all and static:0.05, 5 rounds x 24
# steps in one runtime, the order alternating per round.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g212 --budget-s 75 --archive $OUT/g.tgz --batches 4 --contexts 8192 --policies "writescope transfer-all static:0.05" deepseek_v2:5:24:70 > $OUT/grids.log 2>&1; echo "grids rc=$?"; grep -A2 "vs the best baseline" /tmp/g212/report-deepseek_v2.txt | head -2
