# Run 208 (run 207's lease, warm): DeepSeek's and Mixtral's whole grids on the headroom's build.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g208d --budget-s 150 --archive $OUT/gd.tgz deepseek_v2:2:24:140 > $OUT/gridsd.log 2>&1; echo "gridsd rc=$?"; grep -A8 "vs the best baseline" /tmp/g208d/report-deepseek_v2.txt | head -8
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g208m --budget-s 330 --archive $OUT/gm.tgz mixtral:2:16:320 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -A8 "vs the best baseline" /tmp/g208m/report-mixtral.txt | head -8
