# Run 211 (f5336a3's bundle): writescope's GPU-only steps took 5.8 % longer than transfer-all's
# same steps at DeepSeek 4 x 8K (run 210), 1.5 % at Qwen3 4 x 8K. Where? One trio each,
# profiling writescope and transfer-all twice (24 steps).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for a in deepseek_v2 qwen3_moe; do deploy/profile-bench.sh --one-trio --arch $a --batch 4 --context 8192 --policies "writescope transfer-all writescope transfer-all" --steps 24 --out /tmp/p211-$a > $OUT/profile-$a.log 2>&1; echo "$a rc=$?"; grep -E "^(writescope|transfer-all) +4" $OUT/profile-$a.log; done
tar czf $OUT/p.tgz -C /tmp p211-deepseek_v2 p211-qwen3_moe
