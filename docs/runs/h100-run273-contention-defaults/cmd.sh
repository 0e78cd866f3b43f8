# Run 273 (session 58, 2026-12-06, an H100 80GB HBM3, 029242c): the contention part of
# ../h100-run273-level-check-ab/cmd.sh, which ran it first (its "if [[ -z ${SKIP_CONTENTION:-} ]]"
# block): writescope alone with the scheduler's defaults (the median of three and the level
# check on), Qwen3 4 layers, 16 x 32K, an 8-thread CPU + DRAM load on for 10 s and off for
# 10 s, twice. 65 s. Report: contention-report.txt; docs/measurements.md "Session 58".
# (Session 57's try of this experiment, with the median alone, found no ws_cpu_load in its
# bundle: git show 0549309:docs/runs/run273-next-lease/cmd.sh.)
