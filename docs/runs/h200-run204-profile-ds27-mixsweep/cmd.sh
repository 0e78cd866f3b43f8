# Run 204: (1) where writescope's step at DeepSeek 32 x 32K goes against static:0.5 and
# monolithic at nearly the same share (run 203: 50.4 against 48.1 ms): one trio, each policy's
# point profiled in turn, twice; (2) the full DeepSeek-V2-Lite (27 layers) at 32 x 32K, the
# 1M-token point, on this build; (3) a share sweep at Mixtral 32 x 32K.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
timeout 150 deploy/profile-bench.sh --one-trio --arch deepseek_v2 --layers 4 --batch 32 --context 32768 --policies "writescope static:0.5 monolithic writescope static:0.5" --steps 8 --out /tmp/p204 > $OUT/profile.log 2>&1; echo "profile rc=$?"
tar czf $OUT/p.tgz -C /tmp/p204 . 2>/dev/null
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g204a --budget-s 270 --archive $OUT/g27.tgz --layers 27 --batches 32 --contexts 32768 deepseek_v2:2:16 > $OUT/grids27.log 2>&1; echo "grids27 rc=$?"; tail -3 $OUT/grids27.log
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g204b --budget-s 170 --archive $OUT/gmix.tgz --batches 32 --contexts 32768 --policies "writescope monolithic static:0.3 static:0.35 static:0.4 static:0.45 static:0.5" mixtral:3:16:150 > $OUT/gridsmix.log 2>&1; echo "gridsmix rc=$?"; cat /tmp/g204b/sweep-mixtral.txt
