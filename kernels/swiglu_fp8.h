// SwiGLU that also writes what the next FP8 product reads (model.precision fp8): the Llama MLP's
// down product quantizes SwiGLU's output per row, and the MLP's input gradient quantizes the gate
// and up gradients per row as one matrix (trainer/model/fp8_linear.h). Written by separate kernels,
// each quantization reads back a [tokens, intermediate] tensor (two, for the gradients) that the
// SwiGLU kernel has just written: on Llama-3.1-8B, 7.8 ms of the FP8 LoRA step's 212 for the
// gradients alone (bench/README.md, session 19). Here one kernel per row keeps the row's values in
// registers and writes both forms.
//
// The bytes are the separate ops' exactly: the values are rounded to the storage dtype first and
// quantized from there, with the quantization's own arithmetic (kernels/fp8_rows.cuh). The CPU
// implementations are those compositions (swiglu ops, then kernels/fp8.h), and the CUDA tests hold
// the kernels to them. Registered as kubetune::swiglu_forward_fp8 / swiglu_backward_fp8.
#pragma once

#include <torch/types.h>

#include <tuple>

#include "kernels/fp8.h"

namespace kubetune::kernels {

// silu(gate) * up, and the same quantized per row.
std::tuple<torch::Tensor, Fp8Rows> swiglu_forward_fp8(const torch::Tensor& gate,
                                                      const torch::Tensor& up);

struct SwigluGradientsFp8 {
  torch::Tensor d_gate, d_up;  // as swiglu_backward_with_output makes them
  torch::Tensor output;        // silu(gate) * up, recomputed
  Fp8Rows d_gate_up;           // [d_gate d_up] * column_scale, quantized per row as one matrix
  // [d_gate d_up] as one tensor (the packed form only): the buffer the CUDA kernel wrote them into
  // (d_gate and d_up its halves; the op's schema declares them as tensors of their own), or their
  // concatenation on the CPU and where rows do not allow 16-byte accesses.
  torch::Tensor d_packed;
};

// swiglu_backward_with_output, and [d_gate d_up] times `column_scale` ([2 * intermediate] float32,
// or undefined for none) quantized as quantize_rows_fp8({d_gate, d_up}, column_scale) does.
SwigluGradientsFp8 swiglu_backward_fp8(const torch::Tensor& grad, const torch::Tensor& gate,
                                       const torch::Tensor& up,
                                       const torch::Tensor& column_scale = {});

// Whether gate and up ([rows, cols] each) are the two halves of one packed [rows, 2 * cols]
// tensor, gate's columns first: what the _packed functions below pass, and the CUDA kernels read in
// place.
bool are_packed_halves(const torch::Tensor& gate, const torch::Tensor& up);

// The same on gate and up packed side by side in one [rows, 2 * cols] tensor, gate first (a fused
// gate_up_proj), read in place on CUDA; the gradients come packed the same way too, as d_packed.
std::tuple<torch::Tensor, Fp8Rows> swiglu_forward_fp8_packed(const torch::Tensor& gate_up);
SwigluGradientsFp8 swiglu_backward_fp8_packed(const torch::Tensor& grad,
                                              const torch::Tensor& gate_up,
                                              const torch::Tensor& column_scale = {});

}  // namespace kubetune::kernels
