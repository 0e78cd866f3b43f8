# Run 267 (session 56; run's command line, 264's bundle): the kernels compared with the
# gpu_worker's timing-led expert placement off (run 266: with --stream_experts=off and the hot
# experts off, six trios gave the same generation to the last bit). Qwen3 shapes, 4 layers,
# a 32768-token prompt, 32 greedy tokens, transfer-all.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader; mkdir -p $OUT/g; SECONDS=0
WS_GPU_WORKER_FLAGS=--stream_experts=off HOT_EXPERTS=off timeout 110 deploy/generate-kernels.sh \
  --bin /tmp/ws/bin --device cuda --out $OUT/g --prompt 32768 --tokens 32 registers default bulk3x2 \
  > $OUT/run267.txt 2>&1
echo "rc=$? ${SECONDS}s"; grep -v "^prefill" $OUT/run267.txt | tail -14; rm -f $OUT/g/prompt-ids.txt
