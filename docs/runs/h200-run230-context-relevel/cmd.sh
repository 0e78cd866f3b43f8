# Run 230 (the re-level on a change of host tokens, rest_tokens_tolerance 0.5): Qwen3 32 x 8K
# and 32 x 32K, writescope, transfer-all and cpu-all, 2 rounds of 16 steps in one runtime (as
# run 229), with the cpu_worker's threads pinned (WS_PIN_THREADS=cpu), then unpinned.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
mkdir -p /tmp/p; i=0
for pin in cpu off; do
  i=$((i+1)); SECONDS=0
  WS_PIN_THREADS=$pin deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/p/$i-$pin --budget-s 110 --batches 32 --contexts 8192,32768 --policies "writescope transfer-all cpu-all" qwen3_moe:2:16:105 > /tmp/p/$i-$pin.log 2>&1; rc=$?
  echo "== $i $pin rc=$rc ${SECONDS}s"; grep -h "pinning" /tmp/p/$i-$pin/grid-qwen3_moe.log | head -1
  grep -hE "^(writescope|transfer-all|cpu-all) " /tmp/p/$i-$pin/grid-qwen3_moe.log | cut -c1-110
  tar czf $OUT/p.tgz -C /tmp p
done
