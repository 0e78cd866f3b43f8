# Run 200: the monolithic baseline's re-split copies on half the cores (the commit in the
# output): contention with monolithic beside writescope / static:0.5 / transfer-all (Qwen3
# 16 x 32K, an 8-thread triad from 10 s for 20 s), then the Qwen3 (2 x 24) and DeepSeek
# (3 x 24) grids.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
mkdir -p $OUT/c; timeout 260 deploy/contention.sh --policies "writescope monolithic static:0.5 transfer-all" --before 10 --during 20 --after 10 --load-threads 8 --out $OUT/c > $OUT/c/contention.log 2>&1; echo "contention rc=$?"; tail -1 $OUT/c/contention.log
python3 deploy/contention_report.py $OUT/c/contention-steps.csv $OUT/c/contention-events.csv > $OUT/c/contention-report.txt 2>&1; sed -n 1,6p $OUT/c/contention-report.txt
python3 -c "
import csv,collections; d=collections.defaultdict(lambda:[0,0.0,0,0.0,0])
for r in csv.DictReader(open('$OUT/c/contention-steps.csv')):
  x=d[r['policy']]; b=int(float(r.get('resplit_blocks') or 0)); x[0]+=b; x[1]+=float(r.get('resplit_ms') or 0); x[2]+=b>0; x[3]+=float(r['step_ms']); x[4]+=1
for p,x in d.items(): print('resplits',p,'blocks',x[0],'ms %.1f'%x[1],'steps',x[2],'| all steps',x[4],'sum %.0f ms mean %.2f'%(x[3],x[3]/x[4]))
"
cd $OUT/c && tar czf ../contention.tgz . && cd - >/dev/null && rm -rf $OUT/c
deploy/gpu-grids.sh --one-runtime --no-probe --out /tmp/g200 --budget-s 290 --archive $OUT/g.tgz qwen3_moe:2:24:160 deepseek_v2:3:24:125 > $OUT/grids.log 2>&1; echo "grids rc=$?"; tail -4 $OUT/grids.log
