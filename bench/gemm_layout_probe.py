#!/usr/bin/env python3
"""Which memory layout of a frozen weight makes a LoRA layer's two bf16 base products fastest on
this GPU, for Phi-4's linear shapes at a micro-batch of 2 x 2048 tokens: the forward x W^T and the
input's gradient dY W, with the weight kept as the checkpoint has it ([out, in], what a dequantized
4-bit weight is) or transposed ([in, out]), through cuBLAS and through cuBLASLt, written fresh or
added into an existing output (beta = 1, as the frozen group adds the LoRA parts). Times are
CUDA-event medians of 20 runs.

  python3 bench/gemm_layout_probe.py
"""
import torch
from cuda_timing import timed_median

TOKENS = 4096
SHAPES = {  # name: (out, in), Phi-4 (hidden 5120, intermediate 17920, 40 q and 10 kv heads of 128)
    "qkv_proj": (7680, 5120), "o_proj": (5120, 5120),
    "gate_up_proj": (35840, 5120), "gate or up alone": (17920, 5120), "down_proj": (5120, 17920),
}


def cases(x, dy, w, wt, out_y, out_dx):
    return {
        "y = x W^T   W [out,in]": lambda: x @ w.t(),
        "y = x W^T   W^T kept": lambda: x @ wt,
        "dX = dY W   W [out,in]": lambda: dy @ w,
        "dX = dY W   W^T kept": lambda: dy @ wt.t(),
        "dX += dY W  W [out,in]": lambda: out_dx.addmm_(dy, w),
        "dX += dY W  W^T kept": lambda: out_dx.addmm_(dy, wt.t()),
        "y += x W^T  W [out,in]": lambda: out_y.addmm_(x, w.t()),
    }


def main():
    print(torch.cuda.get_device_name(0), torch.__version__)
    for name, (n, k) in SHAPES.items():
        x = torch.randn(TOKENS, k, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(TOKENS, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        wt = w.t().contiguous()
        out_y, out_dx = torch.zeros_like(dy), torch.zeros_like(x)
        flops = 2 * TOKENS * n * k
        print(f"\n{name}: M={TOKENS} N={n} K={k}")
        for backend in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(backend)
            for label, fn in cases(x, dy, w, wt, out_y, out_dx).items():
                ms = timed_median(fn)
                print(f"  {backend:8s} {label:24s} {ms:7.3f} ms {flops / ms / 1e9:6.0f} TFLOP/s")
        torch.backends.cuda.preferred_blas_library("cublas")


if __name__ == "__main__":
    main()
