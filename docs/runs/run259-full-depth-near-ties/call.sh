export CALL_START=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash docs/runs/h100-run260-gqa-bulk/cmd.sh > $OUT/run261-kernels.txt 2>&1
  grep -E "^(NVIDIA|test rc|bench)|qwen3 +32768 +1 |mixtral +32768 +1 " $OUT/run261-kernels.txt
fi
bash docs/runs/run259-full-depth-near-ties/cmd.sh
