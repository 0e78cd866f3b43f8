# Run 199: the monolithic baseline now moves its KV when its target moves (bbb7b15): the CUDA
# e2e (moved KV under the gpu_worker's early rounds), contention with monolithic beside
# writescope / static:0.5 / transfer-all (Qwen3 16 x 32K, an 8-thread triad from 10 s for
# 20 s), then Qwen3's grid (2 x 24).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "e2e rc=$?"; tail -2 $OUT/generate-cuda.txt; grep -h "re-splits\|policies:" $OUT/generate-cuda.txt | cut -c1-200
mkdir -p $OUT/c; timeout 260 deploy/contention.sh --policies "writescope monolithic static:0.5 transfer-all" --before 10 --during 20 --after 10 --load-threads 8 --out $OUT/c > $OUT/c/contention.log 2>&1; echo "contention rc=$?"; tail -2 $OUT/c/contention.log
python3 deploy/contention_report.py $OUT/c/contention-steps.csv $OUT/c/contention-events.csv > $OUT/c/contention-report.txt 2>&1; tail -14 $OUT/c/contention-report.txt
python3 -c "
import csv,collections; d=collections.defaultdict(lambda:[0,0.0,0])
for r in csv.DictReader(open('$OUT/c/contention-steps.csv')):
  x=d[r['policy']]; x[0]+=int(float(r.get('resplit_blocks') or 0)); x[1]+=float(r.get('resplit_ms') or 0); x[2]+=float(r.get('resplit_blocks') or 0)>0
for p,x in d.items(): print('resplits',p,'blocks',x[0],'ms %.1f'%x[1],'steps',x[2])
"
cd $OUT/c && tar czf ../contention.tgz . && cd - >/dev/null && rm -rf $OUT/c
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g199 --budget-s 170 --archive $OUT/g.tgz qwen3_moe:2:24 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -10 $OUT/grids.log
