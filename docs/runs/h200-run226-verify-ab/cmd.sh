# Run 226 (3e414eb): the CUDA e2e (the explore reasons and the new metrics on the H200 for the
# first time); then the rest_shift_scaled A/B, writescope alone, Qwen3 16 x 32K, an 8-thread
# triad on for 10 s and off for 10 s, 3 times per trio, in the order scaled, fall, fall, scaled
# (run 225's scaled trio ran first and was slower in every phase).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e.log 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e.log
for run in scaled1 fall1 fall2 scaled2; do
  flags=""; [[ $run == fall* ]] && flags="--rest_shift_scaled=false"
  mkdir -p /tmp/c/$run; SECONDS=0; WS_COORDINATOR_FLAGS="$flags" timeout 130 deploy/contention.sh --policies writescope --before 10 --during 10 --after 10 --cycles 3 --load-threads 8 --out /tmp/c/$run > /tmp/c/$run/contention.log 2>&1; echo "$run rc=$? ${SECONDS}s"
  python3 deploy/contention_report.py /tmp/c/$run/contention-steps.csv /tmp/c/$run/contention-events.csv --warmup /tmp/c/$run/contention-warmup.csv > /tmp/c/$run/contention-report.txt 2>&1; sed -n 2p /tmp/c/$run/contention-report.txt | cut -c1-220; grep -A8 Reaction /tmp/c/$run/contention-report.txt | cut -c1-220
  gzip /tmp/c/$run/*.csv; tar czf $OUT/c.tgz -C /tmp c
done
