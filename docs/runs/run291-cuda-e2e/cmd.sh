# Run 291 (session 66, 2026-12-07): the CUDA e2e on session 65's code (rest_guess_check; bundle
# b23d54d), then launch_test.sh on the CUDA device, then issue 4's batch-1 floors (session 60's
# table; never run on an H200; FLOORS=1 runs them on any card, ~10 s).
# The bundle (run with carry ["dist"]):
#   rm -rf dist && WS_BUNDLE_BINARIES="coordinator gpu_worker cpu_worker wscope ws_reference \
#     ws_probe attention_bench" deploy/gpu-bundle.sh
# Run as: FLOORS=1 bash docs/runs/run291-cuda-e2e/cmd.sh
bash docs/runs/h100-run284-cuda-e2e/cmd.sh
