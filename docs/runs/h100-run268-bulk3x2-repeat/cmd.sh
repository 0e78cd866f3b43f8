# Run 268 (session 56; run's command line, 264's bundle): run 267's bulk3x2 and default trios
# again (8 tokens), to see whether bulk3x2's 0.0146 at token 6 comes back to the last bit (a
# deterministic rounding difference) or moves (a race).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
mkdir -p $OUT/g
WS_GPU_WORKER_FLAGS=--stream_experts=off HOT_EXPERTS=off timeout 55 deploy/generate-kernels.sh \
  --bin /tmp/ws/bin --device cuda --out $OUT/g --prompt 32768 --tokens 8 bulk3x2 default > $OUT/run268.txt 2>&1
echo "rc=$?"; python3 -c "
import json
for k in ('bulk3x2','default'):
  d=json.load(open('$OUT/g/gen-%s.json'%k)); print(k, d['tokens'], ['%.6f'%x for x in d['logprobs']])"
rm -f $OUT/g/prompt-ids.txt $OUT/g/launch*
