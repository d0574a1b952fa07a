// Where each of the model's parameters lives in a Hugging Face checkpoint. Most live under their
// own name. A mixture of experts' stacks (experts.h) are stored one tensor per expert and linear
// on the Hub and by transformers' save_pretrained (model.layers.0.mlp.experts.3.gate_proj.weight,
// Mixtral's model.layers.0.block_sparse_moe.experts.3.w1.weight), and Mixtral's router as
// block_sparse_moe.gate.weight; gpt-oss stores each stack whole under its own name, transposed.
// A multimodal checkpoint keeps its language model under language_model.*.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/model/model_config.h"

namespace kubetune::model {

struct StoredSlice {
  std::string name;     // the checkpoint's tensor
  int64_t expert = -1;  // the expert of the stack it holds; -1: it is the whole parameter
  // The rows of that expert's [out, in] it holds (gate and up share gate_up_proj).
  int64_t first_row = 0, rows = 0;
  // The whole stack, stored as [E, in, out] (gpt-oss: family.h, stored_transposed).
  bool transposed = false;
};

// The checkpoint tensors that make up `parameter` (a full name, "model.layers.0.mlp.gate.weight"),
// in order.
std::vector<StoredSlice> stored_slices(const ModelConfig& c, const std::string& parameter);

// The part of `value` (the parameter's value) that `slice` holds.
at::Tensor slice_of(const at::Tensor& value, const StoredSlice& slice);

// A multimodal checkpoint's language model (ModelConfig::wrapped_in_multimodal) is stored under
// language_model.model.* and language_model.lm_head.* by transformers and on the Hub; these are
// the other names a tensor may have there (transformers 5's module names, model.language_model.*
// and lm_head.*), tried when the first is absent.
std::vector<std::string> other_stored_names(const std::string& stored);
// Whether a multimodal checkpoint's tensor belongs to its language model (else to the parts
// kubetune carries untouched: the vision tower, the projector).
bool is_language_model_tensor(const std::string& stored);

}  // namespace kubetune::model
