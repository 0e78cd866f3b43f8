# Run 301 (session 67, 2026-12-07), at 2dd4589: issue 4's GPU tables with session 66's code (the
# inline lists, the MLA and bulk4 split rules) and this session's "in a row" columns: the floors
# first where the GPU is an H200, then attention_bench's batch-1 anatomy, the CUDA GQA table (with
# --gqa-splits) and the MLA table at 8K, 32K and 128K x batch 1, 4, 32, and the merge table; then
# cpu_attention_test on the host's CPU (its AVX-512 kernels; this machine's CPUs lack AVX-512) and
# cuda_attention_test, both whole.
# The bundle: WS_BUNDLE_BINARIES="attention_bench cuda_attention_test cpu_attention_test ws_probe"
#   deploy/gpu-bundle.sh, carry ["dist"].
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"; grep commit /tmp/ws/MANIFEST | head -1
grep -o -m1 -E "model name.*" /proc/cpuinfo; grep -o -E "\b(avx512f|avx512_bf16|amx_bf16|amx_tile)\b" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
floors=--no-floors; [[ $gpu == *H200* ]] && floors=
SECONDS=0; timeout 280 /tmp/ws/bin/attention_bench --no-cpu --no-logits --no-prefill --no-overlap $floors --gqa-splits --iters=15 --tokens=8192,32768,131072 --batch=1,4,32 > $OUT/tables.txt 2>&1; echo "tables rc=$? ${SECONDS}s"
grep -E -A12 "where the time goes|CUDA MLA decode" $OUT/tables.txt | cut -c1-250 | head -40
SECONDS=0; timeout 150 /tmp/ws/bin/cpu_attention_test > $OUT/cpu_attention_test.txt 2>&1; echo "cpu_attention_test rc=$? ${SECONDS}s"
grep -E "SKIPPED|FAILED|PASSED|KernelTable|AutoRuns|Long" $OUT/cpu_attention_test.txt | grep -v "RUN " | tail -20
SECONDS=0; timeout 120 /tmp/ws/bin/cuda_attention_test > $OUT/cuda_attention_test.txt 2>&1; echo "cuda_attention_test rc=$? ${SECONDS}s"; tail -3 $OUT/cuda_attention_test.txt
