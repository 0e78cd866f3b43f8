# Run 215 (898215e, the rest taken after the lines): Mixtral's whole grid, 2 rounds of 16 steps
# in one runtime (its last whole grid ran on 2b3924c, run 208).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g215m --budget-s 330 --archive $OUT/gm.tgz mixtral:2:16:325 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A8 "vs the best baseline" /tmp/g215m/report-mixtral.txt | head -8
