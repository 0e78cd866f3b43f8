# Run 303 (session 68, 2026-12-07): the batch-1 anatomy with gap_row, b4_gap and host_row at
# 8K, 16K and 32K (is the slower 8K call in a row, runs 301-302, the decode following the last
# layer's split merge, or the host's launches?), 30 iterations, with --timeline (bulk4's CTAs'
# stamps: where a batch-1 call's time goes); where the GPU is an H200,
# issue 4's machine, first the floors and issue 4's tables with the in-a-row columns (run
# 302's H200 branch); then cuda_attention_test.
# The bundle: WS_BUNDLE_BINARIES="attention_bench cuda_attention_test cpu_attention_test
#   ws_probe" deploy/gpu-bundle.sh, carry ["dist"].
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
if [[ $gpu == *H200* ]]; then
  SECONDS=0; timeout 300 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap --gqa-splits --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/tables.txt 2>&1; echo "tables rc=$? ${SECONDS}s"
  grep -E -A12 "where the time goes|CUDA MLA decode" $OUT/tables.txt | cut -c1-280 | head -40
fi
SECONDS=0; timeout 150 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap --no-floors --no-mla --no-merge --timeline --iters=30 --tokens=8192,16384,32768 --batch=1 > $OUT/anatomy.txt 2>&1; echo "anatomy rc=$? ${SECONDS}s"
grep -E -A14 "where the time goes|on a timeline" $OUT/anatomy.txt | cut -c1-280
SECONDS=0; timeout 120 /tmp/ws/bin/cuda_attention_test > $OUT/cuda_attention_test.txt 2>&1; echo "cuda_attention_test rc=$? ${SECONDS}s"; tail -1 $OUT/cuda_attention_test.txt
