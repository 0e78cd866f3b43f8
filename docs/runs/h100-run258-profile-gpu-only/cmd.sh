# Run 258 (session 52): where writescope's GPU-only steps spend the +0.3 ms a step they took
# over transfer-all's paired steps at DeepSeek 4 x 8K on the H100s (runs 246-253): one trio,
# writescope and transfer-all in turn twice, each point 16 warm-up and 32 measured steps, the
# last 16 profiled (deploy/profile-bench.sh: the per-phase summary, the Chrome traces).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe" deploy/gpu-bundle.sh
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
nvidia-smi --query-gpu=name --format=csv,noheader; grep commit /tmp/ws/MANIFEST 2>/dev/null | head -1
SECONDS=0; timeout 200 deploy/profile-bench.sh --arch deepseek_v2 --layers 4 --batch 4 --context 8192 --one-trio --policies "writescope transfer-all writescope transfer-all" --steps 16 --point-warmup 16 --point-steps 32 --out $OUT/p258 --bin /tmp/ws/bin > $OUT/p258.txt 2>&1; echo "profile rc=$? ${SECONDS}s"
grep -v "^\s*$" $OUT/p258.txt | grep -iv "^layer\|^  layer" | cut -c1-160 | tail -80
