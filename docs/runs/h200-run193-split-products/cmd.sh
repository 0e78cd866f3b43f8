# Run 193: every GPU matrix product on the weights' bf16 copies (x split three ways into
# bf16; no fp32 copies): device_linear_test, the CUDA e2e, step spans against run 189's,
# sampler_bench old (f654a8a) and new on the H200's host, then Qwen3's grid (2 x 24).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
for t in device_linear_test cuda_logits_test; do
  timeout 200 /tmp/ws/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/$t.txt | tr '\n' ' ')"; done
WS_E2E_DEVICE=cuda timeout 300 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -3 $OUT/generate-cuda.txt
for a in deepseek_v2 qwen3_moe; do
  deploy/profile-bench.sh --arch $a --layers 4 --batch 32 --context 8192 --policies writescope --steps 24 --out /tmp/p-$a > $OUT/profile-$a.txt 2>&1
  grep -h "GPU matrix products\|hot experts" $OUT/profile-$a.txt | head -4
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
(echo "# old (f654a8a)"; dist/extra/sampler_bench_old --vocabs=102400,151936 --rows=100; echo "# new"; /tmp/ws/bin/sampler_bench --vocabs=102400,151936 --rows=100) > $OUT/sampler_bench.txt 2>&1; tail -4 $OUT/sampler_bench.txt
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g193 --budget-s 200 --archive $OUT/g.tgz qwen3_moe:2:24 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -12 $OUT/grids.log
grep -h "hot experts" /tmp/g193/grid-*.log | head -4
grep -h -A8 "The CPU experts" /tmp/g193/report-*.txt | cut -c1-400
