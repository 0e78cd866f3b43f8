# Run 229: do the CPU experts' level shifts come from where the kernel puts the threads? Runs
# 227-228 saw a point's CPU experts sit at one level for seconds and jump (Qwen3 32 x 32K:
# 28-30, 33-35, 42-44, 50-52 ms a step, the same work). Qwen3 32 x 8K and 32 x 32K, writescope,
# transfer-all and cpu-all, 2 rounds of 16 steps in one runtime, under WS_PIN_THREADS off,
# all, cpu, all, off (each trio timed apart: at most 90 s).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
mkdir -p /tmp/p; i=0
for pin in off all cpu all off; do
  i=$((i+1)); SECONDS=0
  WS_PIN_THREADS=$pin deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/p/$i-$pin --budget-s 110 --batches 32 --contexts 8192,32768 --policies "writescope transfer-all cpu-all" qwen3_moe:2:16:105 > /tmp/p/$i-$pin.log 2>&1; rc=$?
  echo "== $i $pin rc=$rc ${SECONDS}s"; grep -h "pinning" /tmp/p/$i-$pin/grid-qwen3_moe.log | head -1
  grep -hE "^(writescope|transfer-all|cpu-all) " /tmp/p/$i-$pin/grid-qwen3_moe.log | cut -c1-110
  tar czf $OUT/p.tgz -C /tmp p
done
