# Run 305 (session 69, 2026-12-07): run 304's question (is the L2 flush between timed runs cold
# for the decode?) with, on an H200 (issue 4's machine), run 302's tables first.
# Run 303's timeline read 67 MB right after a decode of the same bytes at above the H100's HBM
# rate (19.2 µs between marks against 24.6 for the anatomy's read after a read): the flush's
# streaming loads may leave the lines that the decode's bulk copies brought in. The batch-1
# anatomy with its timeline and the GQA and MLA tables at 8K and 32K x 1 and 4, first with
# the flush as always (--flush=stream), then with normal-priority loads (--flush=cached).
# The bundle: WS_BUNDLE_BINARIES="attention_bench cuda_attention_test cpu_attention_test
#   ws_probe" deploy/gpu-bundle.sh at 60c8187, carry ["dist"].
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
if [[ $gpu == *H200* ]]; then
  SECONDS=0; timeout 230 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap --gqa-splits --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/tables.txt 2>&1; echo "tables rc=$? ${SECONDS}s"
  grep -E -A12 "where the time goes|CUDA MLA decode" $OUT/tables.txt | cut -c1-250 | head -40
fi
for f in stream cached; do
  SECONDS=0; timeout 110 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap --no-floors --no-merge --timeline --flush=$f --iters=15 --tokens=8192,32768 --batch=1,4 > $OUT/flush-$f.txt 2>&1; echo "flush=$f rc=$? ${SECONDS}s"
  grep -E -A9 "on a timeline" $OUT/flush-$f.txt | tail -4 | cut -c1-200
  grep -E -A3 "^model +tokens +splits" $OUT/flush-$f.txt | cut -c1-130
  grep -E -A14 "^model +tokens +batch" $OUT/flush-$f.txt | cut -c1-110
done
SECONDS=0; timeout 60 /tmp/ws/bin/cuda_attention_test > $OUT/cuda_attention_test.txt 2>&1; echo "cuda_attention_test rc=$? ${SECONDS}s"; tail -1 $OUT/cuda_attention_test.txt
