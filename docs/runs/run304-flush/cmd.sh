# Run 304 (session 68, 2026-12-07): is the L2 flush between timed runs cold for the decode?
# Run 303's timeline read 67 MB right after a decode of the same bytes at above the H100's HBM
# rate (19.2 µs between marks against 24.6 for the anatomy's read after a read): the flush's
# streaming loads may leave the lines that the decode's bulk copies brought in. The batch-1
# anatomy with its timeline and the GQA and MLA tables at 8K and 32K x 1 and 4, first with
# the flush as always (--flush=stream), then with normal-priority loads (--flush=cached).
# The bundle: WS_BUNDLE_BINARIES="attention_bench cuda_attention_test cpu_attention_test
#   ws_probe" deploy/gpu-bundle.sh, carry ["dist"].
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
for f in stream cached; do
  SECONDS=0; timeout 120 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap --no-floors --no-merge --timeline --flush=$f --iters=15 --tokens=8192,32768 --batch=1,4 > $OUT/flush-$f.txt 2>&1; echo "flush=$f rc=$? ${SECONDS}s"
  grep -E -A9 "on a timeline" $OUT/flush-$f.txt | tail -4 | cut -c1-200
  grep -E -A3 "^model +tokens +splits" $OUT/flush-$f.txt | cut -c1-130
  grep -E -A14 "^model +tokens +batch" $OUT/flush-$f.txt | cut -c1-110
done
