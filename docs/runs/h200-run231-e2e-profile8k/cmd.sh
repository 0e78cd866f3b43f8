# Run 231 (f6a6cf3, session 43's final build): the CUDA e2e; then where writescope's GPU-only
# steps lose to transfer-all's at 8K (the same transfers, the step less them 2.1-8.8 ms
# against 2.1-3.6, run 230): one trio per shape, the grid's point first under writescope,
# then writescope and transfer-all profiled in turn three times each (8 warm-up + 8 steps,
# the last 6 traced). Qwen3 32 x 8K, then Mixtral 16 x 8K (below the best baseline in every
# round of runs 222-228).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e.log
P="writescope transfer-all writescope transfer-all writescope transfer-all"
for spec in qwen3_moe:32 mixtral:16; do
  arch=${spec%%:*} b=${spec#*:}; SECONDS=0; mkdir -p $OUT/prof-$arch
  timeout 200 deploy/profile-bench.sh --one-trio --arch $arch --layers 4 --batch $b --context 8192 --grid-first $b:8192 --policies "$P" --steps 6 --out $OUT/prof-$arch > $OUT/prof-$arch/profile.log 2>&1; echo "$arch rc=$? ${SECONDS}s"
  gzip -f $OUT/prof-$arch/*.json
  grep -E "^== |tokens/s|step" $OUT/prof-$arch/profile.log | cut -c1-160 | head -60
done
