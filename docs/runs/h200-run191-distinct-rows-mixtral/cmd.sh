# Run 191: Mixtral's greedy grid (2 x 16) with the bench's rows starting from distinct tokens (9d0e1f6).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g --budget-s 540 --archive $OUT/g.tgz mixtral:2:16 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -4 $OUT/grids.log
sed -n '/speedup/,/all but monolithic/p' /tmp/g/report-mixtral.txt
