// Linear layers with frozen base weights (LoRA's base model) that read the same input, run as one
// autograd node: q/k/v, or gate/up/down of the MLP with SwiGLU between.
//
// Under plain autograd each LoRA layer is several nodes (base product, A product, B product and
// the sum), and backward adds up the input's gradient with separate kernels: about twelve passes
// over [tokens, hidden] per decoder layer that only add. Here backward accumulates every part of
// the input's gradient into one buffer inside the GEMMs (cuBLAS with beta = 1), as Unsloth's
// fast_lora does; under model.precision fp8 the adapters' parts are written first and the FP8
// product is added to them by cuBLASLt (kernels::fp8_mm_add_), and so is the forward's LoRA sum.
// The MLP node keeps only its input and the gate and up products for backward, and recomputes
// SwiGLU's output there (one [tokens, intermediate] activation less per layer).
//
// A fused gate_up_proj (Phi-3) is one member whose product holds gate and up side by side.
//
// Used on CUDA when every layer of the group is frozen and without LoRA dropout, and a 4-bit
// (QLoRA) layer's compute dtype is the products' (`can_group`); the CPU keeps the plain layers,
// which the parity tests hold against PEFT. The group computes what the plain layers compute:
// products in the autocast dtype (or the input's without autocast), LoRA gradients cast to the
// adapters' dtype.
#pragma once

#include <torch/types.h>

#include <vector>

#include "kernels/swiglu.h"
#include "trainer/model/layers.h"

namespace kubetune::model {

// Whether the layers' own settings let them run as one group, whatever the input: frozen weights
// and biases, no LoRA dropout. can_group adds the input's side.
bool layers_can_group(const std::vector<LinearImpl*>& linears);

// Whether these layers can run as one group on `x`'s device (callers pass `require_cuda = false`
// only in tests, to hold the group against the plain layers on the CPU).
bool can_group(const torch::Tensor& x, const std::vector<LinearImpl*>& linears,
               bool require_cuda = true);

// Every layer applied to x; outputs in the order of `linears`.
std::vector<torch::Tensor> frozen_linear_group(const torch::Tensor& x,
                                               const std::vector<LinearImpl*>& linears);

// While one is alive on a thread, the MLP nodes it makes leave their output uninitialised: the
// recompute of a checkpointed decoder layer (trainer/model/causal_lm.cpp) builds the layer's graph
// only to run its backward, and the MLP's output, the last thing the layer adds, is never read
// there. The node then skips the down product and SwiGLU's output (backward makes what it needs
// of them), and a node over chunks computes nothing until backward.
class MlpOutputNotRead {
 public:
  MlpOutputNotRead() : MlpOutputNotRead(true) {}
  ~MlpOutputNotRead();
  MlpOutputNotRead(const MlpOutputNotRead&) = delete;
  MlpOutputNotRead& operator=(const MlpOutputNotRead&) = delete;
  static bool active();

 protected:
  explicit MlpOutputNotRead(bool not_read);

 private:
  bool previous_;
};

// Inside a MlpOutputNotRead, while one of these is alive the MLP nodes compute their output after
// all: for a layer that reads it before the residual sum (Gemma's post-feed-forward norm, whose
// backward reads its input; left uninitialised, the recompute's gradients were garbage).
class MlpOutputRead : public MlpOutputNotRead {
 public:
  MlpOutputRead() : MlpOutputNotRead(false) {}
};

// Tokens per chunk when the MLP node runs over chunks of its input, for `tokens` tokens and an
// intermediate width of `intermediate`; 0 when it runs over all of them at once. Long sequences
// are chunked: at 311k tokens one [tokens, 14336] bf16 tensor of Llama-3.1-8B is 8.3 GiB, and
// backward held six of them. Chunked, the node keeps only its input and recomputes gate and up
// for each chunk in backward: in a checkpointed layer's recompute (MlpOutputNotRead) that costs
// nothing, as the forward products are skipped there. Chunks are 512 MiB of the intermediate width.
int64_t swiglu_mlp_chunk_rows(int64_t tokens, int64_t intermediate);

// Whether the MLP node computes `act` under these products: SwiGLU always, GeGLU only without FP8
// products (there is no GeGLU kernel that writes FP8).
bool mlp_node_computes(kernels::GateActivation act, bool fp8_products);

// down(act(gate(x)) * up(x)) as one node, act SiLU (SwiGLU) or tanh GELU (GeGLU), for `linears`
// gate, up and down, or a fused gate_up (gate's rows first) and down; over chunks of `chunk_rows`
// tokens when positive (-1: swiglu_mlp_chunk_rows's choice under no grad mode or
// MlpOutputNotRead, else none).
torch::Tensor frozen_gated_mlp(const torch::Tensor& x, const std::vector<LinearImpl*>& linears,
                               kernels::GateActivation act = kernels::GateActivation::kSilu,
                               int64_t chunk_rows = -1);

}  // namespace kubetune::model
