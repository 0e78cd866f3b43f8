# Run 196: 9e5f45d on the H200: device_linear_test, cuda_logits_test, the CUDA e2e (its CUDA
# reference tolerance), the step spans with the sliced split products (against runs 189/193).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for t in device_linear_test cuda_logits_test; do
  timeout 200 /tmp/ws/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/$t.txt | tr '\n' ' ')"; done
grep -h "rms |error|" $OUT/device_linear_test.txt
WS_E2E_DEVICE=cuda timeout 300 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -1 $OUT/generate-cuda.txt
grep -h "^FAIL\|deepseek_v2/periodic_530 vs ws_reference: prompt" $OUT/generate-cuda.txt | cut -c1-200
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
