# Run 299 (session 66, 2026-12-07): issue 4's GPU tables with this session's code (the inline
# lists, the MLA and bulk4 split rules): attention_bench's CUDA GQA and MLA tables and the batch-1
# anatomy at 8K, 32K and 128K x batch 1, 4, 32, and the merge table; the floors first on an H200.
# The bundle: run 298's (WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference
#   ws_probe attention_bench cuda_attention_test" deploy/gpu-bundle.sh), carry ["dist"].
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
floors=--no-floors; [[ $gpu == *H200* ]] && floors=
SECONDS=0; timeout 200 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap $floors --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/tables.txt 2>&1; echo "tables rc=$? ${SECONDS}s"
grep -E -A12 "where the time goes|CUDA GQA decode: ping|CUDA MLA decode" $OUT/tables.txt | cut -c1-200 | head -60
