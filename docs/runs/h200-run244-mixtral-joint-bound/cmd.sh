# Run 244 (prepared in session 48, run in session 49): Mixtral 32 x 32K, the 1.4x point, against the
# roofline that holds the KV streaming and the CPU experts to one host memory. Session 48's
# bench_report counts, with the lease's joint host read (ws_probe's host_read_shared, probed
# before and after the grid), every host KV byte and the weights of the experts the cpu_worker
# ran (the new cpu_experts_per_layer column, exact where runs 238-242 had only an estimate).
# At run 120's 122.5 GB/s that floor is 206 ms, 1.34x of cpu-all's 276 ms (run 242): 1.4x needs
# a lease whose joint read is at least ~128 GB/s, and a step at the floor.
# The bundle (the trio and the probe; same one serves run 243):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe cpu_experts_bench kv_transfer_bench" deploy/gpu-bundle.sh
#   (run with carry ["dist"]; ws_reference for the e2e)
# First the CUDA e2e on this build (~62 s in run 241): the gpu_worker's new count of the CPU's
# experts on the CUDA device, hot experts among them.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64 WS_BIN=/tmp/ws/bin
WS_E2E_DEVICE=cuda timeout 150 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/e2e-cuda.txt 2>&1; echo "e2e rc=$?"; tail -1 $OUT/e2e-cuda.txt; grep -E "^FAIL|cpu_worker ran" $OUT/e2e-cuda.txt | head -5
SECONDS=0
deploy/gpu-grids.sh --one-runtime --turns 2 --turn-warmup 4 --out /tmp/g244/mixtral --budget-s 300 --batches 32 --contexts 32768 --policies "writescope cpu-all transfer-all" --archive $OUT/g-mixtral.tgz mixtral:3:8:150 > $OUT/grid-mixtral.log 2>&1; echo "mixtral rc=$? ${SECONDS}s"
grep -E "vs the best baseline|host memory|both at once" /tmp/g244/mixtral/report-mixtral.txt | cut -c1-400
python3 deploy/best_baseline_report.py /tmp/g244/mixtral/bench-mixtral.csv | sed -n '/^Paired/,/^Points/p'
