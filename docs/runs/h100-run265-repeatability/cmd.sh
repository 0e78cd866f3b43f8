# Run 265 (session 56): is the service's greedy generation the same from one trio to the next?
# Run 264 started two trios on the same kernel (no flag, and bulk4 named) and their first
# token's log-probability, which only the prefill sets, differed by 0.0012; they parted at
# token 18. Here the same trio (default kernel, Qwen3 shapes, 4 layers, an 8192-token prompt,
# 8 tokens, transfer-all) three times with the gpu_worker's hot experts on (auto) and three
# times with them off, each generation compared with the first of its set.
# The bundle: run 264's.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
mkdir -p $OUT/rep
for hot in auto off; do
  for i in 1 2 3; do
    HOT_EXPERTS=$hot timeout 60 deploy/generate-kernels.sh --bin /tmp/ws/bin --device cuda \
      --out $OUT/rep/$hot$i --tokens 8 default > $OUT/rep/$hot$i.txt 2>&1 || echo "$hot$i rc=$?"
    rm -f $OUT/rep/$hot$i/prompt-ids.txt
  done
  for i in 2 3; do
    echo "== hot $hot: trio $i against trio 1"
    python3 deploy/compare_generations.py $OUT/rep/${hot}1/gen-default.json $OUT/rep/$hot$i/gen-default.json
  done
done
python3 -c "
import json,sys
for h in ('auto','off'):
  for i in (1,2,3):
    d=json.load(open('$OUT/rep/%s%d/gen-default.json'%(h,i))); print(h,i,d['tokens'],['%.8f'%x for x in d['logprobs'][:3]])"
tar czf $OUT/g265.tgz -C $OUT rep && rm -rf $OUT/rep
