# Run 209: at 8K writescope reads GPU-only where monolithic's small split (0.05-0.10) ran
# 4-7 % faster in runs 207-208 (Qwen3 32 x 8K, Mixtral 16 x 8K), its CPU experts shorter
# while fewer copies ran beside them. Is a small split the optimum there? Static shares
# 0.05-0.30 beside transfer-all (share 0), writescope and monolithic, one runtime, 3 x 16.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
P="writescope monolithic transfer-all static:0.05 static:0.1 static:0.15 static:0.2 static:0.3"
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g209 --budget-s 190 --archive $OUT/g.tgz --batches 16,32 --contexts 8192 --policies "$P" qwen3_moe:3:16:180 > $OUT/grids.log 2>&1; echo "grids rc=$?"; grep -E "^batch|best static|writescope:|monolithic:" /tmp/g209/sweep-*.txt | head -20
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g209m --budget-s 200 --archive $OUT/gm.tgz --batches 16 --contexts 8192 --policies "$P" mixtral:3:16:190 > $OUT/gridsm.log 2>&1; echo "gridsm rc=$?"; grep -E "^batch|best static|writescope:|monolithic:" /tmp/g209m/sweep-*.txt | head -20
