# Run 209b (run 209's lease, warm): one trio profiling Qwen3 32 x 8K under writescope,
# transfer-all and static:0.05, twice each (16 steps).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin; deploy/profile-bench.sh --one-trio --arch qwen3_moe --batch 32 --context 8192 --policies "writescope transfer-all static:0.05 writescope transfer-all static:0.05" --steps 16 --out /tmp/p210 > $OUT/profile.log 2>&1; echo rc=$?; tail -5 $OUT/profile.log; ls /tmp/p210; tar czf $OUT/p.tgz -C /tmp/p210 .
