# Run 288 (written in session 64, 2026-12-07; two starts refused there; run in session 65 on an H100:
# e2e 188 of 188, launch_test 36 of 36; no floors, not an H200): the CUDA e2e on session 64's
# code (the scheduler's rest_rise rule and its exploring reason in /metrics), then
# launch_test.sh on the CUDA device, then, on an H200 only, issue 4's batch-1 floors: run 284's
# command as it is.
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench" deploy/gpu-bundle.sh
bash docs/runs/h100-run284-cuda-e2e/cmd.sh
