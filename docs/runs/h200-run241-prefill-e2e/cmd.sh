# Run 241 (session 47): what run 240 left: cuda_prefill_test whole (its 90-s timeout ended it
# in the MLA cases) and the CUDA e2e with the --bench_for check sized from a pilot bench.
# The bundle as run 240's (xz; carry ["dist"]).
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 200 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e-cuda.txt; grep -E "^FAIL|bench_for" $OUT/e2e-cuda.txt | head -5
start=$(date +%s); timeout 300 /tmp/ws/bin/cuda_prefill_test --gtest_brief=1 > $OUT/cuda_prefill_test.txt 2>&1; echo "cuda_prefill_test rc=$? in $(( $(date +%s) - start )) s: $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $OUT/cuda_prefill_test.txt | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/cuda_prefill_test.txt | head -4; grep -c max_abs $OUT/cuda_prefill_test.txt
cd $OUT && tar czf tests.tgz *.txt && rm -f *.txt
# Ran in session 47 (2026-12-05, bundle of run 240; wall 152.3 s), output:
#   e2e rc=0; 181 passed, 0 failed in 61.5 s
#   note: bench --bench_for=3s: 39 steps a round (pilot step 15.23 ms)
#   note: bench --bench_for=3s: 5 round(s) in 2.60 s
#   cuda_prefill_test rc=0 in 90 s: [  PASSED  ] 302 tests.  (369 comparison lines)
