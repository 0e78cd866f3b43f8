# Run 188: the products' CUDA graphs (session 34): tests, the CUDA e2e, spans and an A/B
# against WS_GPU_GRAPHS=0 in the same bundle.
deploy/gpu-run.sh --unpack-only >/dev/null; export LD_LIBRARY_PATH=/tmp/ws/lib:/usr/local/cuda/lib64
for t in device_linear_test cuda_logits_test; do /tmp/ws/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' $OUT/$t.txt | tr '\n' ' ')"; done
WS_GPU_GRAPHS=0 /tmp/ws/bin/device_linear_test --gtest_brief=1 > $OUT/device_linear_test-nographs.txt 2>&1; echo "nographs rc=$?"
WS_E2E_DEVICE=cuda timeout 300 python3 tests/e2e/generate_test.py --root "$PWD" --bin /tmp/ws/bin > $OUT/generate-cuda.txt 2>&1; echo "generate-cuda rc=$?"; tail -2 $OUT/generate-cuda.txt
export WS_BIN=/tmp/ws/bin
for rep in 1; do for g in 1 0; do for a in deepseek_v2 qwen3_moe; do
  WS_GPU_GRAPHS=$g deploy/profile-bench.sh --arch $a --layers 4 --batch 32 --context 8192 --policies writescope --steps 24 --out /tmp/p-$g-$a-$rep > /tmp/profile-$g-$a-$rep.txt 2>&1
  python3 deploy/../docs/runs/h200-run188-product-graphs/spans.py /tmp/p-$g-$a-$rep/profile-writescope.json graphs=$g $a $rep
done; done; done 2>&1 | tee $OUT/spans.txt
grep -h "CUDA graph" /tmp/ws-launch.*/* 2>/dev/null | head -3
deploy/ab-grids.sh --out /tmp/ab --arch deepseek_v2 --repeats 2 --batches 32 --contexts 8192,32768 --budget-s 150 --archive $OUT/ab.tgz base nographs:env/WS_GPU_GRAPHS=0 > $OUT/ab.log 2>&1; echo "ab rc=$?"; sed -n '/A\/B of/,$p' $OUT/ab.log
