# Run 189: CUDA tests and e2e at dc957b7 (re-read mends, mixed batches, RoPE memo),
# then DeepSeek's grid sampled (t0.7/p0.9) and greedy on one lease, and step spans.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for t in cuda_logits_test device_linear_test cuda_experts_test device_experts_test cuda_attention_test; do
  timeout 200 /tmp/ws/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/$t.txt | tr '\n' ' ')"; done
WS_E2E_DEVICE=cuda timeout 300 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -3 $OUT/generate-cuda.txt
for a in deepseek_v2 qwen3_moe; do
  deploy/profile-bench.sh --arch $a --layers 4 --batch 32 --context 8192 --policies writescope --steps 24 --out /tmp/p-$a > $OUT/profile-$a.txt 2>&1
  python3 - /tmp/p-$a/profile-writescope.json $a <<'PY'
import json,sys,collections
t=json.load(open(sys.argv[1])); ev=t['traceEvents'] if isinstance(t,dict) else t
d=collections.defaultdict(list)
for e in ev:
  if e.get('ph')=='X' and e.get('pid')==2: d[e['name']].append(e['dur'])
steps=sorted(d['step']); n=len(steps)
out=' '.join('%s=%.0f'%(k,sorted(d[k])[len(d[k])//2]) for k in ['qkv','o_proj','router','shared_experts','logits','kv_write'] if d[k])
print(sys.argv[2],'steps',n,'step_med_us=%.0f'%steps[n//2],out)
PY
done 2>&1 | tee $OUT/spans.txt
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/gs --budget-s 150 --sampling temperature=0.7,top_p=0.9 --archive $OUT/g-sampled.tgz deepseek_v2:3:24 > $OUT/grids-sampled.log 2>&1; echo "sampled rc=$?"; tail -25 $OUT/grids-sampled.log
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/gg --budget-s 150 --archive $OUT/g-greedy.tgz deepseek_v2:3:24 > $OUT/grids-greedy.log 2>&1; echo "greedy rc=$?"; tail -25 $OUT/grids-greedy.log
