# Run 224: writescope's GPU-only steps at the 8K points took 3-6 % longer than transfer-all's
# same steps (runs 210, 222), nearly all of it in the CPU experts. This build's steps CSV adds
# the gpu_worker's KV copies per step and its process's CPU time: writescope and
# transfer-all alone at Qwen3 and DeepSeek 4 and 16 x 8K, 4 rounds of 24 steps, one runtime.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for a in qwen3_moe:4:24:110 deepseek_v2:4:24:100; do
  n=${a%%:*}; deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g224-$n --budget-s 120 --archive $OUT/g-$n.tgz --batches 4,16 --contexts 8192 --policies "writescope transfer-all" $a > $OUT/grids-$n.log 2>&1; echo "$n rc=$?"; grep -A2 "vs the best baseline" /tmp/g224-$n/report-$n.txt | head -2
done
