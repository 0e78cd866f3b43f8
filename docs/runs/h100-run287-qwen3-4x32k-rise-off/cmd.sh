# Run 287 (session 64, 2026-12-07, the H100 lease of runs 285-286, warm): run 285's setting
# with the rest_rise rule off, 400 paired rounds. Run as:
#   WS_COORDINATOR_FLAGS=--rest_rise_gap_share=0 BATCHES=4 CONTEXTS=32768 REPEATS=40 \
#     TOTAL_S=440 GRID_OUT=/tmp/g287 bash docs/runs/h100-run285-qwen3-4x32k-rise/cmd.sh
# (the bundle: run 285's). grids.log here; the grid's CSVs and reports are summarised in
# docs/measurements.md "Session 64".
