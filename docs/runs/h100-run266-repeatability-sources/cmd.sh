# Run 266 (session 56): which of the gpu_worker's timing-led choices makes run 265's trios part?
# The same trio (default kernel, Qwen3 shapes, 4 layers, an 8192-token prompt, 8 tokens,
# transfer-all, hot experts off) three times each:
#   nostream: --stream_experts=off (every routed expert of a prefill chunk on the cpu_worker);
#   noearly:  that, and --prefetch_next_step=false (no KV rounds queued ahead of a step).
# The bundle: run 264's.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
mkdir -p $OUT/rep
for v in nostream noearly; do
  flags="--stream_experts=off"; [[ $v == noearly ]] && flags="$flags --prefetch_next_step=false"
  for i in 1 2 3; do
    WS_GPU_WORKER_FLAGS="$flags" HOT_EXPERTS=off timeout 60 deploy/generate-kernels.sh \
      --bin /tmp/ws/bin --device cuda --out $OUT/rep/$v$i --tokens 8 default > $OUT/rep/$v$i.txt 2>&1 || echo "$v$i rc=$?"
    rm -f $OUT/rep/$v$i/prompt-ids.txt
  done
done
python3 -c "
import json
for v in ('nostream','noearly'):
  for i in (1,2,3):
    d=json.load(open('$OUT/rep/%s%d/gen-default.json'%(v,i))); print(v,i,d['tokens'],['%.8f'%x for x in d['logprobs']])"
tar czf $OUT/g266.tgz -C $OUT rep && rm -rf $OUT/rep
