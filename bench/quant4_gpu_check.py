"""On a GPU: kubetune's 4-bit CUDA kernels (torch.ops.kubetune, from the packed trainer) against
bitsandbytes' own CUDA kernels on Llama-3.1-8B's linear shapes: how many NF4 codes and absmax values
differ (bitsandbytes' CUDA uses an approximate reciprocal, ours IEEE division like its CPU path), the
largest difference of the dequantized weights, and the time of one dequantization of each.

usage: python bench/quant4_gpu_check.py PATH/TO/libkubetune_kernels.so"""
import json
import sys

import torch

from cuda_timing import timed

torch.ops.load_library(sys.argv[1])
import bitsandbytes.functional as bnbf  # noqa: E402

ops = torch.ops.kubetune


def main():
    torch.manual_seed(0)
    rows = []
    for name, shape in [("q_proj", (4096, 4096)), ("k_proj", (1024, 4096)), ("gate_proj", (14336, 4096)),
                        ("down_proj", (4096, 14336))]:
        w = (torch.randn(shape, device="cuda") * 0.02).to(torch.bfloat16)
        packed, absmax = ops.quantize_4bit(w, 64, "nf4")
        cpu_packed, cpu_absmax = ops.quantize_4bit(w.cpu(), 64, "nf4")
        ref, state = bnbf.quantize_4bit(w, blocksize=64, compress_statistics=False, quant_type="nf4")
        ours_codes = torch.stack([packed.view(-1) >> 4, packed.view(-1) & 15], 1).view(-1)
        bnb_codes = torch.stack([ref.view(-1) >> 4, ref.view(-1) & 15], 1).view(-1)
        ours_w = ops.dequantize_4bit(packed, absmax, None, 0.0, list(shape), 64, "nf4", torch.bfloat16)
        bnb_w = bnbf.dequantize_4bit(ref, state)
        # Our kernel on bitsandbytes' codes and scales: the same weights as its own dequantization.
        ours_on_bnb = ops.dequantize_4bit(ref, state.absmax, None, 0.0, list(shape), 64, "nf4", torch.bfloat16)
        rows.append({
            "layer": name, "shape": list(shape),
            "cuda_equals_cpu_reference": bool(torch.equal(packed.cpu(), cpu_packed) and torch.equal(absmax.cpu(), cpu_absmax)),
            "codes_differing_from_bnb_cuda": int((ours_codes != bnb_codes).sum()),
            "absmax_equal_bnb_cuda": bool(torch.equal(absmax, state.absmax)),
            "max_weight_diff_vs_bnb": float((ours_w.float() - bnb_w.float()).abs().max()),
            "dequantize_of_bnb_codes_equal": bool(torch.equal(ours_on_bnb, bnb_w)),
            "dequantize_ms_ours": round(timed(lambda: ops.dequantize_4bit(packed, absmax, None, 0.0, list(shape), 64, "nf4", torch.bfloat16)), 4),
            "dequantize_ms_bnb": round(timed(lambda: bnbf.dequantize_4bit(ref, state)), 4),
        })
        print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
