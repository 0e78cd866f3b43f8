# Run 243 (prepared in session 47, run in session 49): the CPU experts' rate with and without the KV
# streaming beside them. Runs 238-242 found the same expert work 10-23 % slower under
# transfer-all than under cpu-all at 32K; this measures it without the trio. The bundle:
#   rm -rf dist && WS_BUNDLE_BINARIES="cpu_experts_bench kv_transfer_bench ws_probe" \
#     deploy/gpu-bundle.sh      # run with carry ["dist"]
# Order: alone, under a pinned H2D stream (kv_transfer_bench's per-layer transfers, many
# steps, in a loop), alone again (drift). The stream's own launcher thread takes one of the 16
# cores: the experts bench with 15 threads alone is the fair control for that.
# Session 48 added the probe first: this lease's joint host read (the CPU stream and the pinned
# copies at once, host_read_shared) beside the experts' own loss under the stream.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64; B=/tmp/ws/bin
timeout 90 $B/ws_probe --json=$OUT/probe.json --channel=false --pageable_mib=256 > $OUT/probe.log 2>&1; grep -E "H2D pinned|DRAM|both at once" $OUT/probe.log
experts() { OMP_NUM_THREADS=$1 timeout 120 $B/cpu_experts_bench --shapes=qwen3,mixtral --batch=4,32 --seconds=2 --modes=packed 2>&1 | grep -E "^(Qwen3|Mixtral).* packed" ; }
echo "== alone, 16 threads"; experts 16 | tee $OUT/alone16.txt
echo "== alone, 15 threads"; experts 15 | tee $OUT/alone15.txt
( while true; do $B/kv_transfer_bench --device=cuda --context=32768 --batch=16 --arena_layers=4 --steps=200; done ) > $OUT/stream.txt 2>&1 &
stream=$!; sleep 25   # its arena and first transfers
echo "== under the stream, 15 threads"; experts 15 | tee $OUT/stream15.txt
kill $stream; pkill -f kv_transfer_bench; wait 2>/dev/null
grep -iE "GB/s" $OUT/stream.txt | head -6
echo "== alone again, 15 threads"; experts 15 | tee $OUT/again15.txt
