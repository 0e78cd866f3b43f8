# Run 235 (f6a6cf3), run inline on run 234's lease: DeepSeek batch 4 and 16 x 32K again,
# writescope, monolithic and transfer-all, 2 rounds of 24 steps in one runtime (run 233's
# 16 x 32K read 0.82x of monolithic).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin; deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g235 --budget-s 110 --batches 4,16 --contexts 32768 --policies "writescope monolithic transfer-all" --archive $OUT/g.tgz deepseek_v2:2:24:105 > $OUT/grid.log 2>&1; echo "rc=$?"; grep -E "^(writescope|monolithic|transfer-all) " /tmp/g235/grid-deepseek_v2.log | cut -c1-130; grep -A3 "vs the best baseline" /tmp/g235/report-deepseek_v2.txt | head -3
