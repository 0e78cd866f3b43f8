# Run 221 (d2500ad: 3f0f52d's extension of a split exploration whose sequences changed, the
# rule's explorations outside the credit): the CUDA e2e; contention as runs 216-218 (Qwen3 16 x
# 32K, an 8-thread triad from 10 s for 20 s) with the four policies; then writescope alone in
# two more trios (more returns after a load to look at).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e.log
for run in all ws1 ws2; do
  pol="writescope"; [[ $run == all ]] && pol="writescope monolithic static:0.5 transfer-all"
  mkdir -p /tmp/c/$run; timeout 260 deploy/contention.sh --policies "$pol" --before 10 --during 20 --after 10 --load-threads 8 --out /tmp/c/$run > /tmp/c/$run/contention.log 2>&1; echo "$run rc=$?"
  python3 deploy/contention_report.py /tmp/c/$run/contention-steps.csv /tmp/c/$run/contention-events.csv --warmup /tmp/c/$run/contention-warmup.csv > /tmp/c/$run/contention-report.txt 2>&1; sed -n 1,12p /tmp/c/$run/contention-report.txt | cut -c1-200
  gzip /tmp/c/$run/*.csv; tar czf $OUT/c.tgz -C /tmp c
done
