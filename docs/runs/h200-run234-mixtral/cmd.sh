# Run 234 (f6a6cf3): Mixtral's whole grid, 2 rounds of 16 steps in one runtime (as runs 222 and 228).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g234m --budget-s 330 --archive $OUT/gm.tgz mixtral:2:16:325 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A6 "vs the best baseline" /tmp/g234m/report-mixtral.txt | head -6
