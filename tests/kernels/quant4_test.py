"""kubetune's 4-bit quantization (kernels/quant4.cpp, loaded as torch.ops.kubetune) against
bitsandbytes itself on the CPU: the packed NF4/FP4 codes, the absmax values, double quantization
(offset, 8-bit codes, nested absmax) equal bit for bit, and dequantization gives the same weights.

usage: quant4_test.py PATH/TO/libkubetune_kernels.so"""
import sys

import torch

torch.ops.load_library(sys.argv[1])
import bitsandbytes.functional as bnbf  # noqa: E402

ops = torch.ops.kubetune


def inputs():
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 128), (3, 5), (7, 33), (1, 1), (257, 3), (300, 70), (2, 4160), (5, 80), (16, 96)]
    for shape in shapes:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            a = torch.randn(shape, generator=g) * 0.05
            flat = a.view(-1)
            flat[: min(64, flat.numel())] = 0.0  # an all-zero block
            if flat.numel() > 200:
                flat[100:140] *= 1e-6  # tiny values near the smallest codes
            yield shape, a.to(dtype)


def ours(a, blocksize, quant_type, double):
    packed, absmax = ops.quantize_4bit(a, blocksize, quant_type)
    if not double:
        return packed, absmax, None, None
    offset = absmax.mean()
    codes, nested = ops.quantize_8bit_blockwise(absmax - offset)
    return packed, codes, nested, offset


def main():
    checked = 0
    for shape, a in inputs():
        for blocksize in (32, 64, 128, 256):
            for quant_type in ("nf4", "fp4"):
                for double in (False, True):
                    ref, state = bnbf.quantize_4bit(a, blocksize=blocksize, compress_statistics=double,
                                                    quant_type=quant_type)
                    packed, absmax, nested, offset = ours(a, blocksize, quant_type, double)
                    what = f"{shape} {a.dtype} bs={blocksize} {quant_type} double={double}"
                    assert torch.equal(packed, ref), f"packed codes differ: {what}"
                    assert torch.equal(absmax, state.absmax), f"absmax differs: {what}"
                    if double:
                        assert torch.equal(nested, state.state2.absmax), f"nested absmax: {what}"
                        assert offset.item() == state.offset.item(), f"offset: {what}"
                    got = ops.dequantize_4bit(packed, absmax, nested, offset.item() if double else 0.0,
                                              list(shape), blocksize, quant_type, a.dtype)
                    # bitsandbytes' CPU dequantize misplaces the absmax when a row is not a whole
                    # number of blocks (AVX512 path); there the reference is its formula, per flat index.
                    if shape[-1] % blocksize == 0:
                        want = bnbf.dequantize_4bit(ref, state)
                    else:
                        full = state.absmax.float() if not double else bnbf.dequantize_blockwise(
                            state.absmax, state.state2) + state.offset
                        codes = torch.stack([ref.view(-1) >> 4, ref.view(-1) & 15], 1).view(-1).long()
                        n = a.numel()
                        book = bnbf.get_4bit_type(quant_type, device="cpu")
                        want = (book[codes[:n]] * full[torch.arange(n) // blocksize]).to(a.dtype).view(shape)
                    assert got.dtype == a.dtype and got.shape == a.shape, what
                    # +0 and -0 (FP4 code 8) compare equal: the only difference bitsandbytes' paths have.
                    assert torch.equal(got, want), f"dequantized weights differ: {what}"
                    checked += 1
    print(f"{checked} configurations equal to bitsandbytes {__import__('bitsandbytes').__version__} bit for bit")


if __name__ == "__main__":
    main()
