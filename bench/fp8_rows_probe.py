#!/usr/bin/env python3
"""What the FP8 step's memory-bound kernels cost at Llama-3.1-8B's shapes for a micro-batch of
2 x 2048 tokens: our row quantization (an activation; an output gradient with column scales; q/k/v's
three gradients side by side), the SwiGLU kernels that write their FP8 form and QLoRA's 4-bit (NF4,
double quantization) to FP8 conversions of a gate/up weight, as rows and transposed, as CUDA-event
medians of 20 runs, with the bytes each moves per microsecond against a device-to-device copy's.
Run it with two builds' kernels to compare them:

  python3 bench/fp8_rows_probe.py --kernels PACK/lib/libkubetune_kernels.so
"""
import argparse

import torch
from cuda_timing import timed_median

TOKENS, HIDDEN, KV, INTERMEDIATE = 4096, 4096, 1024, 14336


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", required=True)
    args = ap.parse_args()
    torch.ops.load_library(args.kernels)
    ops = torch.ops.kubetune
    print(torch.cuda.get_device_name(0), torch.__version__, args.kernels)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(TOKENS, HIDDEN, **bf16)
    scales = torch.rand(HIDDEN, device="cuda") + 0.5
    qkv = [torch.randn(TOKENS, n, **bf16) for n in (HIDDEN, KV, KV)]
    qkv_scales = torch.rand(HIDDEN + 2 * KV, device="cuda") + 0.5
    gate, up, dy = (torch.randn(TOKENS, INTERMEDIATE, **bf16) for _ in range(3))
    gate_up_scales = torch.rand(2 * INTERMEDIATE, device="cuda") + 0.5
    n, m = TOKENS * HIDDEN, TOKENS * INTERMEDIATE
    # A [14336, 4096] NF4 weight, double quantization, blocks of 64 (codes and scales random).
    w_values = INTERMEDIATE * HIDDEN
    w_packed = torch.randint(0, 256, (w_values // 2,), dtype=torch.uint8, device="cuda")
    w_absmax = torch.randint(0, 256, (w_values // 64,), dtype=torch.uint8, device="cuda")
    w_nested = torch.rand(w_values // 64 // 256, device="cuda") * 0.01
    w_amax = torch.rand(INTERMEDIATE, device="cuda") + 0.5
    w_args = (w_packed, w_absmax, w_nested, 0.005, [INTERMEDIATE, HIDDEN], 64, "nf4", torch.bfloat16,
              w_amax)
    w_t = torch.empty(HIDDEN, INTERMEDIATE, dtype=torch.float8_e4m3fn, device="cuda")
    rows = {  # label: (function, bytes read and written)
        "quantize x [4096, 4096]": (lambda: ops.fp8_quantize_rows([x], None), 3 * n),
        "quantize dy, column scales": (lambda: ops.fp8_quantize_rows([x], scales), 3 * n),
        "quantize dq|dk|dv [4096, 6144]": (lambda: ops.fp8_quantize_rows(qkv, qkv_scales),
                                           3 * TOKENS * (HIDDEN + 2 * KV)),
        "swiglu forward + fp8 [4096, 14336]": (lambda: ops.swiglu_forward_fp8(gate, up), 7 * m),
        "swiglu backward + fp8": (lambda: ops.swiglu_backward_fp8(dy, gate, up, gate_up_scales),
                                  14 * m),
        "4-bit to fp8 rows [14336, 4096]": (lambda: ops.fp8_from_4bit(*w_args), 3 * w_values // 2),
        "4-bit to fp8 transposed": (lambda: ops.fp8_from_4bit_transposed_into(*w_args, w_t, 0),
                                    3 * w_values // 2),
    }
    copy_src, copy_dst = torch.empty(4 * n, dtype=torch.uint8, device="cuda"), torch.empty(
        4 * n, dtype=torch.uint8, device="cuda")
    copy_us = timed_median(lambda: copy_dst.copy_(copy_src)) * 1000
    print(f"{'device-to-device copy 64 MiB':36} {copy_us:8.1f} us {2 * 4 * n / copy_us / 1e3:6.0f} GB/s")
    for label, (fn, moved) in rows.items():
        us = timed_median(fn) * 1000
        print(f"{label:36} {us:8.1f} us {moved / us / 1e3:6.0f} GB/s")


if __name__ == "__main__":
    main()
