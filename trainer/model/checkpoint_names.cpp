#include "trainer/model/checkpoint_names.h"

namespace kubetune::model {

namespace {

const std::string kLanguageModel = "language_model.";

// Where the checkpoint of a multimodal model keeps one of its language model's tensors.
std::string in_language_model(const std::string& name) { return kLanguageModel + name; }

std::vector<StoredSlice> stored_slices_of_language_model(const ModelConfig& c,
                                                         const std::string& parameter) {
  if (!c.family->has_experts()) return {{parameter}};
  const ExpertLayout& layout = c.family->experts;
  // "model.layers.L." + what follows "mlp." in our name, under the checkpoint's block name.
  const std::string ours = ".mlp.";
  const auto at = parameter.find(ours);
  if (at == std::string::npos) return {{parameter}};
  const std::string block = parameter.substr(0, at) + "." + layout.block + ".";
  const std::string rest = parameter.substr(at + ours.size());
  if (rest == "gate.weight") return {{block + "gate.weight"}};
  const bool gate_up = rest == "experts.gate_up_proj", down = rest == "experts.down_proj";
  if (!gate_up && !down) return {{parameter}};
  if (layout.stored_transposed) return {{parameter, -1, 0, 0, /*transposed=*/true}};
  std::vector<StoredSlice> out;
  const int64_t width = c.expert_intermediate_size;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const std::string expert = block + "experts." + std::to_string(e) + ".";
    if (gate_up) {
      out.push_back({expert + layout.gate + ".weight", e, 0, width});
      out.push_back({expert + layout.up + ".weight", e, width, width});
    } else {
      out.push_back({expert + layout.down + ".weight", e, 0, c.hidden_size});
    }
  }
  return out;
}

}  // namespace

std::vector<StoredSlice> stored_slices(const ModelConfig& c, const std::string& parameter) {
  std::vector<StoredSlice> slices = stored_slices_of_language_model(c, parameter);
  if (c.wrapped_in_multimodal())
    for (auto& slice : slices) slice.name = in_language_model(slice.name);
  return slices;
}

std::vector<std::string> other_stored_names(const std::string& stored) {
  if (stored.rfind(kLanguageModel, 0) != 0) return {};
  const std::string rest = stored.substr(kLanguageModel.size());  // model.X or lm_head.X
  if (rest.rfind("model.", 0) == 0) return {"model.language_model." + rest.substr(6)};
  return {rest};
}

bool is_language_model_tensor(const std::string& stored) {
  return stored.rfind(kLanguageModel, 0) == 0 || stored.rfind("model.language_model.", 0) == 0 ||
         stored.rfind("lm_head.", 0) == 0;
}

at::Tensor slice_of(const at::Tensor& value, const StoredSlice& slice) {
  if (slice.transposed) return value.transpose(-2, -1);
  if (slice.expert < 0) return value;
  return value[slice.expert].narrow(0, slice.first_row, slice.rows);
}

}  // namespace kubetune::model
