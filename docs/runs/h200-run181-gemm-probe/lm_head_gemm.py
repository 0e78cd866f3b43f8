# PyTorch's fp32 GEMM at lm_head's shapes on the H200 (run 181): how long cuBLAS takes for
# y[M, vocab] = x[M, hidden] W^T, fp32 without TF32 (what the gpu_worker's SGEMM computes), with
# TF32, and bf16, to set the gpu_worker's lm_head span (1.25 ms at DeepSeek batch 32, run 180)
# against the product alone. CUDA events around 50 calls after 10 warm-up calls.
import torch

torch.backends.cuda.matmul.allow_tf32 = False
shapes = {"deepseek_v2": (2048, 102400), "qwen3_moe": (2048, 151936), "mixtral": (4096, 32000)}
for name, (hidden, vocab) in shapes.items():
    w = torch.randn(vocab, hidden, device="cuda")
    for m in (1, 4, 16, 32, 64):
        x = torch.randn(m, hidden, device="cuda")
        row = [name, m]
        for mode in ("fp32", "tf32", "bf16"):
            torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            a, b = (x, w) if mode != "bf16" else (x.bfloat16(), w.bfloat16())
            for _ in range(10):
                torch.mm(a, b.t())
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                torch.mm(a, b.t())
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end) / 50
            flops = 2.0 * m * hidden * vocab
            row.append(f"{mode} {ms:.3f} ms ({flops / ms / 1e9:.1f} TFLOP/s)")
        print(*row, sep="  ")
    del w
    torch.cuda.empty_cache()
