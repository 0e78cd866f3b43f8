deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
for t in device_linear_test cuda_logits_test; do /tmp/ws/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/$t.txt | tr '\n' ' ')"; done
rm -rf /tmp/ws-old; mkdir -p /tmp/ws-old; cp -a /tmp/ws/bin /tmp/ws-old/bin; gunzip -c dist/gpu_worker_old.gz > /tmp/ws-old/bin/gpu_worker; chmod +x /tmp/ws-old/bin/gpu_worker
for rep in 1 2; do for v in old new; do for a in deepseek_v2 qwen3_moe; do
  b=/tmp/ws/bin; [[ $v == old ]] && b=/tmp/ws-old/bin
  WS_BIN=$b deploy/profile-bench.sh --arch $a --layers 4 --batch 32 --context 8192 --policies writescope --steps 24 --out /tmp/p-$v-$a-$rep > $OUT/profile-$v-$a-$rep.txt 2>&1
  python3 - /tmp/p-$v-$a-$rep/profile-writescope.json $v $a $rep <<'PY'
import json,sys,collections
t=json.load(open(sys.argv[1])); ev=t['traceEvents'] if isinstance(t,dict) else t
d=collections.defaultdict(list)
for e in ev:
  if e.get('ph')=='X' and e.get('pid')==2: d[e['name']].append(e['dur'])
steps=sorted(d['step']); n=len(steps)
out=' '.join('%s=%.0f'%(k,sorted(d[k])[len(d[k])//2]) for k in ['qkv','o_proj','router','shared_experts','logits','kv_write'] if d[k])
print(sys.argv[2],sys.argv[3],'rep',sys.argv[4],'steps',n,'step_med_us=%.0f'%steps[n//2],out)
PY
done; done; done 2>&1 | tee $OUT/spans.txt
export WS_BIN=/tmp/ws/bin
deploy/ab-grids.sh --out /tmp/ab --arch deepseek_v2 --repeats 2 --batches 32 --contexts 8192,32768 --budget-s 300 --archive $OUT/ab.tgz base r2:env/WS_RESERVED_CORES=2 > $OUT/ab.log 2>&1; echo "ab rc=$?"; tail -30 $OUT/ab.log
