"""Causal attention forward + backward under each of LibTorch's SDPA backends, at the model shapes
the bench runs: milliseconds per layer, achieved TFLOP/s, and each backend's largest difference
from an fp32 reference (outputs and input gradients), so a faster backend is only taken when it
computes the same thing.

    python3 bench/attention_probe.py [--shapes llama-3.1-8b:2,llama-3.2-1b:4] [--seq 2048]

q, k and v are laid out as the trainer passes them: [B,T,heads,D] products seen as [B,heads,T,D].
"""
import argparse
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

from cuda_timing import timed_median

SHAPES = {  # heads, key/value heads, head dim
    "llama-3.1-8b": (32, 8, 128),
    "llama-3.2-1b": (32, 8, 64),
}
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def inputs(batch, seq, heads, kv_heads, dim, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def part(h):  # the trainer's [B,T,h,D] product, seen as [B,h,T,D]
        t = torch.randn(batch, seq, h, dim, device="cuda", dtype=torch.float32, generator=g)
        return t.to(dtype).transpose(1, 2).requires_grad_()

    dout = torch.randn(batch, seq, heads, dim, device="cuda", generator=g).to(dtype).transpose(1, 2)
    return part(heads), part(kv_heads), part(kv_heads), dout


def run(q, k, v, dout, backend):
    for t in (q, k, v):
        t.grad = None
    with sdpa_kernel([backend]):
        out = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    out.backward(dout)
    return out, q.grad, k.grad, v.grad


def max_error(got, want):
    return max(((g.float() - w).abs().max() / w.abs().max()).item() for g, w in zip(got, want))


def probe(shape, batch, seq):
    heads, kv_heads, dim = SHAPES[shape]
    q, k, v, dout = inputs(batch, seq, heads, kv_heads, dim, torch.bfloat16)
    # The reference: the same bf16 values in fp32, math backend.
    ref_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    reference = [t.detach() for t in run(*ref_in, dout.float(), SDPBackend.MATH)]
    del ref_in
    flops = 4 * batch * heads * seq * seq * dim / 2 * 3.5  # causal: forward 1, backward 2.5
    for name, backend in BACKENDS.items():
        try:
            got = [t.detach() for t in run(q, k, v, dout, backend)]
            ms = timed_median(lambda: run(q, k, v, dout, backend))
        except RuntimeError as e:
            print(json.dumps({"shape": shape, "backend": name, "error": str(e).splitlines()[0]}))
            continue
        print(json.dumps({"shape": shape, "batch": batch, "seq": seq, "backend": name,
                          "ms_fwd_bwd": round(ms, 4), "tflops": round(flops / ms / 1e9, 1),
                          "max_rel_error": round(max_error(got, reference), 5),
                          "gpu": torch.cuda.get_device_name()}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="llama-3.1-8b:2,llama-3.2-1b:4")
    p.add_argument("--seq", type=int, default=2048)
    a = p.parse_args()
    for item in a.shapes.split(","):
        shape, batch = item.split(":")
        probe(shape, int(batch), a.seq)


if __name__ == "__main__":
    main()
