# Run 300 (session 66, 2026-12-07): the review's mends checked on the device: cuda_attention_test
# whole (the host-lists test with 2, 4 and 5 sequences and reversed window slots), and
# attention_bench's batch-1 anatomy at 2K-8K (its bulk4 columns failed at 2K and 4K in run 298),
# the GQA table with --gqa-splits and the MLA table at 2K-8K x 1-4.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="attention_bench cuda_attention_test" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST | head -1
SECONDS=0; timeout 120 /tmp/ws/bin/cuda_attention_test --gtest_brief=1 > $OUT/test.txt 2>&1; echo "test rc=$? ${SECONDS}s"; tail -2 $OUT/test.txt; grep -m5 -B2 -A6 "Failure" $OUT/test.txt | cut -c1-200; gzip -9 $OUT/test.txt
SECONDS=0; timeout 120 /tmp/ws/bin/attention_bench --no-cpu --no-merge --no-logits --no-prefill --no-overlap --no-floors --gqa-splits --iters=15 --tokens=2048,4096,8192 --batch=1,4 > $OUT/bench.txt 2>&1; echo "bench rc=$? ${SECONDS}s"
grep -E -A12 "where the time goes|CUDA GQA decode: ping|CUDA MLA decode" $OUT/bench.txt | cut -c1-230
