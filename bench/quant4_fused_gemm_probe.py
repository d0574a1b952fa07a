"""On a GPU: is a fused 4-bit GEMM (dequantize inside the GEMM's tiles) faster than what the trainer
does (kubetune::dequantize_4bit into a bf16 weight, then cuBLAS) at training shapes?

Issue 16 asks for whichever measures faster. The fused side here is a Triton kernel (Triton comes
with the torch wheel; this is a measurement, not product code): NF4 codes and their block absmax
read from our packed format, decoded in registers, fed to tensor-core dots in bf16 with an fp32
accumulator. It runs the two products a QLoRA layer runs with its frozen weight W [out, in]:
forward y = x W^T and backward dX = dY W, on Llama-3.1-8B's linear shapes at 4096 tokens (micro-batch
2 x 2048). Printed per shape: milliseconds of cuBLAS alone on a bf16 weight, our dequantize +
cuBLAS, and the fused kernel (best of its autotuned tile configs), with the fused result's largest
difference from the dequantize + cuBLAS result.

The first column bounds any fused kernel, however well written: at best it runs the product as fast
as cuBLAS does on a bf16 weight, with the decoding free. So the most a fused kernel can save is the
gap between the first two columns. (A fused kernel also decodes each weight tile once per tile of
tokens, 16 to 32 times per product at 4096 tokens, where dequantize + cuBLAS decodes it once.)

usage: python bench/quant4_fused_gemm_probe.py PATH/TO/libkubetune_kernels.so [--tokens 4096]"""
import argparse
import json

import torch
import triton
import triton.language as tl

from cuda_timing import timed

CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 8}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [(128, 128, 8, 4), (128, 256, 8, 3), (256, 128, 8, 3), (128, 128, 4, 4),
                         (64, 256, 8, 4), (128, 64, 4, 4)]
]
QBLOCK = 64  # absmax block: the tiles' k step is one block, so each row of a tile has one scale


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % size_m, (pid % per_group) // size_m


@triton.jit
def _weight_tile(q_ptr, absmax_ptr, code_ptr, rows, k0, K, ROWS: tl.constexpr, KCOLS: tl.constexpr):
    """W[rows, k0:k0+KCOLS] in bf16: element (n, k) sits in byte (n K + k) / 2, high nibble first,
    scaled by absmax[(n K + k) / 64]."""
    half = tl.arange(0, KCOLS // 2)
    b = tl.load(q_ptr + (rows[:, None] * K + k0) // 2 + half[None, :])
    codes = tl.join((b >> 4).to(tl.int32), (b & 15).to(tl.int32)).reshape(ROWS, KCOLS)
    vals = tl.load(code_ptr + codes)
    blocks = tl.arange(0, KCOLS // 64)
    scale = tl.load(absmax_ptr + (rows[:, None] * K + k0 + blocks[None, :] * 64) // 64)
    w = vals.reshape(ROWS, KCOLS // 64, 64) * scale[:, :, None]
    return w.reshape(ROWS, KCOLS).to(tl.bfloat16)


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def forward_kernel(x_ptr, q_ptr, absmax_ptr, code_ptr, y_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """y[M, N] = x[M, K] W[N, K]^T."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, 64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, 64):
        a = tl.load(x_ptr + rm[:, None] * K + k0 + rk[None, :])
        w = _weight_tile(q_ptr, absmax_ptr, code_ptr, rn, k0, K, BLOCK_N, 64)
        acc = tl.dot(a, tl.trans(w), acc)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def backward_kernel(dy_ptr, q_ptr, absmax_ptr, code_ptr, dx_ptr, M, N, K,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """dx[M, K] = dy[M, N] W[N, K]; the tile's BLOCK_N runs along K here, the reduction along N."""
    pid_m, pid_k = _tile_ids(M, K, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rr = tl.arange(0, 64)
    k0 = pid_k * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for n0 in range(0, N, 64):
        g = tl.load(dy_ptr + rm[:, None] * N + n0 + rr[None, :])
        w = _weight_tile(q_ptr, absmax_ptr, code_ptr, n0 + rr, k0, K, 64, BLOCK_N)
        acc = tl.dot(g, w, acc)
    tl.store(dx_ptr + rm[:, None] * K + k0 + tl.arange(0, BLOCK_N)[None, :], acc.to(tl.bfloat16))


def fused_forward(x, packed, absmax, code, n):
    m, k = x.shape
    y = torch.empty(m, n, device=x.device, dtype=torch.bfloat16)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    forward_kernel[grid](x, packed, absmax, code, y, m, n, k)
    return y


def fused_backward(dy, packed, absmax, code, k):
    m, n = dy.shape
    dx = torch.empty(m, k, device=dy.device, dtype=torch.bfloat16)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(k, meta["BLOCK_N"]),)
    backward_kernel[grid](dy, packed, absmax, code, dx, m, n, k)
    return dx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernels_library")
    ap.add_argument("--tokens", type=int, default=4096)
    args = ap.parse_args()
    torch.ops.load_library(args.kernels_library)
    ops = torch.ops.kubetune
    torch.manual_seed(0)
    code = ops.dequantize_4bit(torch.tensor([[0x01], [0x23], [0x45], [0x67], [0x89], [0xAB], [0xCD], [0xEF]],
                                            dtype=torch.uint8, device="cuda"),
                               torch.ones(1, device="cuda"), None, 0.0, [16], 64, "nf4", torch.float32)
    totals = {"cublas_bf16_ms": 0.0, "dequantize_cublas_ms": 0.0, "fused_ms": 0.0}
    m = args.tokens
    for name, (n, k) in [("q_proj", (4096, 4096)), ("k_proj", (1024, 4096)), ("o_proj", (4096, 4096)),
                         ("gate_proj", (14336, 4096)), ("down_proj", (4096, 14336))]:
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        packed, absmax = ops.quantize_4bit(w, QBLOCK, "nf4")
        packed = packed.view(-1)
        dense = ops.dequantize_4bit(packed, absmax, None, 0.0, [n, k], QBLOCK, "nf4", torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        deq = lambda: ops.dequantize_4bit(packed, absmax, None, 0.0, [n, k], QBLOCK, "nf4", torch.bfloat16)
        row = {"layer": name, "shape": [n, k], "tokens": m}
        for direction, floor, ours, fused in [
            ("forward", lambda: x @ dense.t(), lambda: x @ deq().t(),
             lambda: fused_forward(x, packed, absmax, code, n)),
            ("backward_dx", lambda: dy @ dense, lambda: dy @ deq(),
             lambda: fused_backward(dy, packed, absmax, code, k)),
        ]:
            diff = (fused().float() - ours().float()).abs().max().item()
            scale = ours().float().abs().max().item()
            row[direction] = {"cublas_bf16_ms": round(timed(floor), 4),
                              "dequantize_cublas_ms": round(timed(ours), 4),
                              "fused_ms": round(timed(fused), 4),
                              "fused_max_rel_diff": round(diff / scale, 5)}
            for key in totals:
                # k_proj stands for v_proj too, and the layer has q, k, v, o, gate, up, down.
                totals[key] += row[direction][key] * {"k_proj": 2, "gate_proj": 2}.get(name, 1)
        print(json.dumps(row), flush=True)
    print(json.dumps({"per_decoder_layer_ms": {k: round(v, 3) for k, v in totals.items()},
                      "fused_over_dequantize_cublas": round(totals["fused_ms"] / totals["dequantize_cublas_ms"], 3)}))


if __name__ == "__main__":
    main()
