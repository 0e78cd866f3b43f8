# Run 237 (6814dbc: the expert placement counts the step's own KV transfers): the CUDA e2e;
# then Mixtral 32 x 32K under writescope, an 8-thread CPU + DRAM load on for 15 s and off for
# 15 s twice: where the routed experts ran (cpu_expert_ms 0: on the GPU) and the steps' times
# with and without the load (run 236, before the change: 8 steps with the experts on the GPU
# at 416-532 ms against 281-312 around them).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e.log
mkdir -p /tmp/c; SECONDS=0
timeout 200 deploy/contention.sh --arch mixtral --batch 32 --context 32768 --policies writescope --before 15 --during 15 --after 15 --cycles 2 --load-threads 8 --out /tmp/c > /tmp/c/contention.log 2>&1; echo "contention rc=$? ${SECONDS}s"
python3 deploy/contention_report.py /tmp/c/contention-steps.csv /tmp/c/contention-events.csv --warmup /tmp/c/contention-warmup.csv > /tmp/c/contention-report.txt 2>&1; head -30 /tmp/c/contention-report.txt | cut -c1-200
python3 - <<'PY'
import csv
rows=list(csv.DictReader(open('/tmp/c/contention-steps.csv')))
print('steps', len(rows), 'with the experts on the GPU (cpu_expert_ms 0):', sum(float(r['cpu_expert_ms'])==0 for r in rows))
PY
gzip /tmp/c/*.csv; tar czf $OUT/c.tgz -C /tmp c
# The contention part above asked for 32768 tokens, more than Mixtral's context with the
# decode steps (every round was refused, nothing measured). It ran again on the same lease as:
#   deploy/contention.sh --arch mixtral --batch 32 --context 32512 --policies writescope \
#     --before 15 --during 15 --after 15 --cycles 2 --load-threads 8 --out /tmp/c
# whose outputs are in c/.
