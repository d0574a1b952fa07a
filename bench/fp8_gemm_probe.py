#!/usr/bin/env python3
"""What an FP8 product gains over bf16 on this GPU, for Llama-3.1-8B's linear shapes at a micro-batch
of 2 x 2048 tokens: torch.mm in bf16 against torch._scaled_mm with row-wise scales (fast accumulation
on and off) and with one scale per tensor, plus what our quantization (kubetune::fp8_quantize_rows)
and a weight's transpose cost. Times are CUDA-event medians of 20 runs.

  python3 bench/fp8_gemm_probe.py [--kernels PACK/lib/libkubetune_kernels.so]
"""
import argparse

import torch
from cuda_timing import timed_median

SHAPES = {  # name: (tokens, out, in)
    "q_proj / o_proj": (4096, 4096, 4096), "k/v_proj": (4096, 1024, 4096),
    "gate/up_proj": (4096, 14336, 4096), "down_proj": (4096, 4096, 14336),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels")
    args = ap.parse_args()
    if args.kernels:
        torch.ops.load_library(args.kernels)
    print(torch.cuda.get_device_name(0), torch.__version__)
    e4m3 = torch.float8_e4m3fn
    for name, (m, n, k) in SHAPES.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        xq, wq = x.to(e4m3), w.to(e4m3)
        sa, sb = torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")
        one = torch.ones((), device="cuda")
        flops = 2 * m * n * k
        rows = {"bf16 mm": timed_median(lambda: x @ w.t())}
        for fast in (False, True):
            rows[f"fp8 row-wise fast={fast}"] = timed_median(
                lambda: torch._scaled_mm(xq, wq.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast))
        rows["fp8 tensor-wise fast"] = timed_median(
            lambda: torch._scaled_mm(xq, wq.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
        rows["weight transpose (fp8)"] = timed_median(lambda: wq.t().contiguous())
        if args.kernels:
            rows["weight transpose (ours)"] = timed_median(lambda: torch.ops.kubetune.fp8_transpose(wq))
            rows["quantize x rows"] = timed_median(lambda: torch.ops.kubetune.fp8_quantize_rows([x], None))
        for label, ms in rows.items():
            tf = f"{flops / ms / 1e9:7.0f} TFLOP/s" if "mm" in label or "fp8 " in label[:4] else ""
            print(f"{name:16} {label:26} {ms:8.3f} ms {tf}")


if __name__ == "__main__":
    main()
