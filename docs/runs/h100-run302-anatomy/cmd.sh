# Run 302 (session 67, 2026-12-07): run 301's tables on an H200, issue 4's machine (runs 292-301
# all came on H100s), with the floors first; on any other GPU only cuda_attention_test (8 s),
# since run 301 has the H100's tables at this code, and the batch-1 anatomy at 8K and 32K again
# (30 iterations: does run 301's slower 8K call in a row hold on another lease?).
# The bundle: run 301's (WS_BUNDLE_BINARIES="attention_bench cuda_attention_test cpu_attention_test
#   ws_probe" deploy/gpu-bundle.sh at 848c0fd), carry ["dist"].
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
if [[ $gpu == *H200* ]]; then
  SECONDS=0; timeout 300 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap --gqa-splits --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/tables.txt 2>&1; echo "tables rc=$? ${SECONDS}s"
  grep -E -A12 "where the time goes|CUDA MLA decode" $OUT/tables.txt | cut -c1-250 | head -40
else
  SECONDS=0; timeout 120 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap --no-floors --no-mla --no-merge --iters=30 --tokens=8192,32768 --batch=1 > $OUT/anatomy.txt 2>&1; echo "anatomy rc=$? ${SECONDS}s"
  grep -E -A9 "where the time goes" $OUT/anatomy.txt | cut -c1-250
fi
SECONDS=0; timeout 120 /tmp/ws/bin/cuda_attention_test > $OUT/cuda_attention_test.txt 2>&1; echo "cuda_attention_test rc=$? ${SECONDS}s"; tail -1 $OUT/cuda_attention_test.txt
