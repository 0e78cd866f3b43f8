# Run 192: the full DeepSeek-V2-Lite (27 layers) at 32 x 32K (the 1M-token point), the five
# policies in one trio, 2 rounds, with the bench's rows starting from distinct tokens (9d0e1f6).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
deploy/gpu-grids.sh --one-runtime --no-probe --layers 27 --batches 32 --contexts 32768 --out /tmp/g --budget-s 480 --archive $OUT/g.tgz deepseek_v2:2:16 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -3 $OUT/grids.log
grep -E "^(writescope|transfer-all|cpu-all|static:0.5|monolithic) " /tmp/g/grid-deepseek_v2.log
sed -n '/speedup/,/all but monolithic/p;/Roofline bound from the ceilings/,/^$/p' /tmp/g/report-deepseek_v2.txt
