#include "trainer/io/hf_checkpoint.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include "common/strict_json.h"
#include "kernels/quant4.h"
#include "trainer/io/mxfp4.h"
#include "trainer/io/safetensors.h"
#include "trainer/model/checkpoint_names.h"
#include "trainer/model/layers.h"
#include "trainer/model/lora.h"

namespace kubetune::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  fs::rename(tmp, path);
}

std::string shape_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool is_lora_name(const std::string& name) { return name.find(".lora_") != std::string::npos; }

}  // namespace

// Finds each tensor name in either a single file or the shards of an index, opening shards once.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir) : dir_(dir) {
    const std::string single = dir + "/model.safetensors";
    const std::string index = dir + "/model.safetensors.index.json";
    if (fs::exists(index)) {
      index_path_ = index;
      json j = read_json_file_strict(index);
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw std::runtime_error(index + ": field \"weight_map\": missing or not an object");
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it)
        weight_map_[it.key()] = it.value().get<std::string>();
    } else if (fs::exists(single)) {
      files_[single] = std::make_unique<SafetensorsFile>(single);
      single_ = single;
    } else if (fs::exists(dir + "/pytorch_model.bin")) {
      throw std::runtime_error(
          dir + ": only safetensors checkpoints are supported (found pytorch_model.bin)");
    } else {
      throw std::runtime_error(dir + ": no model.safetensors or model.safetensors.index.json");
    }
  }

  // The tensor, or an error naming the file where it should have been.
  at::Tensor get(const std::string& name) {
    if (!single_.empty()) {
      const SafetensorsFile& f = *files_[single_];
      if (!f.contains(name))
        throw std::runtime_error(single_ + ": parameter \"" + name + "\" is missing");
      return f.tensor(name);
    }
    auto it = weight_map_.find(name);
    if (it == weight_map_.end())
      throw std::runtime_error(index_path_ + ": parameter \"" + name +
                               "\" is missing from weight_map");
    const std::string shard = dir_ + "/" + it->second;
    auto& file = files_[shard];
    if (!file) file = std::make_unique<SafetensorsFile>(shard);
    if (!file->contains(name))
      throw std::runtime_error(shard + ": tensor \"" + name + "\" is listed in " + index_path_ +
                               " but absent from the shard");
    return file->tensor(name);
  }
  bool contains(const std::string& name) {
    if (!single_.empty()) return files_[single_]->contains(name);
    return weight_map_.count(name) > 0;
  }
  std::vector<std::string> names() {
    if (!single_.empty()) return files_[single_]->names();
    std::vector<std::string> out;
    for (const auto& [name, file] : weight_map_) out.push_back(name);
    return out;
  }
  std::string file_of(const std::string& name) const {
    if (!single_.empty()) return single_;
    auto it = weight_map_.find(name);
    return it == weight_map_.end() ? index_path_ : dir_ + "/" + it->second;
  }

 private:
  std::string dir_, single_, index_path_;
  std::map<std::string, std::string> weight_map_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

namespace {

// A weight as bitsandbytes' Linear4bit saves it: the packed codes under `name`, and beside them
// name.absmax, name.quant_map (the code book), with double quantization name.nested_absmax, and
// name.quant_state.bitsandbytes__nf4 (or __fp4): the bytes of a JSON object with the blocksize,
// the weight's shape and the nested offset. nullopt for a plain weight.
std::optional<kernels::Quant4State> read_bnb_4bit(CheckpointReader& r, const std::string& name) {
  std::string type, state_name;
  for (const char* t : {"nf4", "fp4"}) {
    if (r.contains(name + ".quant_state.bitsandbytes__" + t)) {
      type = t;
      state_name = name + ".quant_state.bitsandbytes__" + t;
    }
  }
  if (type.empty()) {
    if (r.contains(name + ".absmax")) {
      throw std::runtime_error(r.file_of(name) + ": tensor \"" + name +
                               ".absmax\" has no quant_state beside it (\"" + name +
                               ".quant_state.bitsandbytes__nf4\" or \"__fp4\"): not a "
                               "bitsandbytes 4-bit weight kubetune can read");
    }
    return std::nullopt;
  }
  const at::Tensor blob = r.get(state_name).contiguous().view(at::kByte);
  const json q = json::parse(std::string(reinterpret_cast<const char*>(blob.data_ptr<uint8_t>()),
                                         static_cast<size_t>(blob.numel())),
                             nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    return std::runtime_error(r.file_of(state_name) + ": tensor \"" + state_name + "\": " + what);
  };
  if (!q.is_object() || !q.contains("shape") || !q["shape"].is_array() || q["shape"].size() != 2 ||
      !q.contains("blocksize") || !q["blocksize"].is_number_integer()) {
    throw bad("not bitsandbytes' quant_state JSON (quant_type, blocksize, shape)");
  }
  kernels::Quant4State s;
  s.type = q.value("quant_type", type);
  s.blocksize = q["blocksize"].get<int64_t>();
  if (!kernels::valid_blocksize_4bit(s.blocksize)) {
    throw bad("blocksize " + std::to_string(s.blocksize) +
              " is not one bitsandbytes writes (a power of two from 32 to 4096)");
  }
  s.shape = q["shape"].get<std::vector<int64_t>>();
  s.packed = r.get(name).contiguous().view(at::kByte).reshape({-1, 1});  // any quant_storage
  s.absmax = r.get(name + ".absmax");
  if (q.contains("nested_offset")) {
    s.nested_absmax = r.get(name + ".nested_absmax");
    s.offset = q["nested_offset"].get<double>();
  }
  const int64_t n = s.shape[0] * s.shape[1];
  if (s.packed.numel() * 2 < n || s.absmax.numel() != (n + s.blocksize - 1) / s.blocksize) {
    throw bad("its sizes do not fit the packed weight \"" + name + "\" and its absmax");
  }
  if (r.contains(name + ".quant_map") &&
      !at::equal(r.get(name + ".quant_map").to(at::kFloat), kernels::code_book_4bit(s.type))) {
    throw bad("the code book \"" + name + ".quant_map\" is not bitsandbytes' " + s.type);
  }
  return s;
}

// A slice's tensor as stored, or an expert stack stored in MXFP4 (gpt-oss's published
// checkpoints: NAME_blocks and NAME_scales in the [E, out, in] orientation) made whole.
at::Tensor read_stored(CheckpointReader& reader, const model::StoredSlice& slice,
                       at::ScalarType dtype) {
  const std::string& name = slice.name;
  for (const auto& other : model::other_stored_names(name))
    if (!reader.contains(name) && reader.contains(other)) return reader.get(other);
  if (reader.contains(name) || !reader.contains(name + "_blocks")) return reader.get(name);
  at::Tensor whole =
      dequantize_mxfp4(reader.get(name + "_blocks"), reader.get(name + "_scales"), dtype, name);
  return slice.transposed ? whole.transpose(-2, -1) : whole;
}

}  // namespace

std::string hf_dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      throw std::runtime_error(std::string("unsupported model dtype ") + c10::toString(dtype));
  }
}

c10::ScalarType hf_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "float16") return at::kHalf;
  return at::kBFloat16;
}

HfWeights::HfWeights(const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": model directory does not exist");
  if (!fs::exists(dir + "/config.json"))
    throw std::runtime_error(dir + "/config.json: missing (is this a Hugging Face model folder?)");
  reader_ = std::make_unique<CheckpointReader>(dir);
  config_ = model::ModelConfig::from_dir(dir);
}

HfWeights::~HfWeights() = default;

void HfWeights::load_into(torch::nn::Module& part, const std::string& prefix) {
  CheckpointReader& reader = *reader_;
  auto full_name = [&](const std::string& name) {
    return prefix.empty() ? name : prefix + "." + name;
  };
  torch::NoGradGuard no_grad;
  // Linear weights saved in bitsandbytes' 4-bit format are kept so, not expanded.
  std::set<std::string> quantized;
  for (const auto& item : part.named_modules()) {
    auto linear = std::dynamic_pointer_cast<model::LinearImpl>(item.value());
    if (!linear) continue;
    const std::string name = full_name(item.key().empty() ? "weight" : item.key() + ".weight");
    if (auto state = read_bnb_4bit(reader, model::stored_slices(config_, name).front().name)) {
      if (state->shape != linear->weight.sizes().vec()) {
        throw std::runtime_error(reader.file_of(name) + ": tensor \"" + name + "\" has shape " +
                                 shape_text(state->shape) + " but the model expects " +
                                 shape_text(linear->weight.sizes()));
      }
      linear->set_quantized(std::move(*state));
      quantized.insert(name);
    }
  }
  for (auto& item : part.named_parameters()) {
    const std::string name = full_name(item.key());
    if (is_lora_name(name) || quantized.count(name)) continue;
    // Most parameters are one tensor; an expert stack is one per expert (checkpoint_names.h).
    for (const auto& slice : model::stored_slices(config_, name)) {
      at::Tensor dst = model::slice_of(item.value(), slice);
      at::Tensor src = read_stored(reader, slice, dst.scalar_type());
      if (src.sizes() != dst.sizes())
        throw std::runtime_error(reader.file_of(slice.name) + ": tensor \"" + slice.name +
                                 "\" has shape " + shape_text(src.sizes()) +
                                 " but the model expects " + shape_text(dst.sizes()));
      dst.copy_(src);
    }
  }
}

void load_hf_weights(model::CausalLM& model, const std::string& dir) {
  HfWeights(dir).load_into(*model, "");
}

namespace {

// The checkpoint tensors of one parameter, each produced when the file reaches it; the
// parameter's value is asked for once, at the first, and dropped after the last.
void append_deferred(model::CausalLM& model, const std::string& name, const at::Tensor& param,
                     c10::ScalarType dtype, const ParameterValue& value_of,
                     std::vector<DeferredTensor>& out) {
  const auto slices = model::stored_slices(model->config(), name);
  auto value = std::make_shared<at::Tensor>();
  const at::Tensor shape_only = at::empty(param.sizes(), at::TensorOptions().device(at::kMeta));
  for (size_t k = 0; k < slices.size(); ++k) {
    const model::StoredSlice slice = slices[k];
    const bool last = k + 1 == slices.size();
    out.push_back({slice.name, dtype, model::slice_of(shape_only, slice).sizes().vec(), [=] {
                     if (!value->defined()) *value = value_of ? value_of(name, param) : param;
                     at::Tensor t = model::slice_of(*value, slice).to(dtype);
                     if (last) *value = at::Tensor();
                     return t;
                   }});
  }
}

// The tensors of a multimodal checkpoint that are not its language model's (the vision tower, the
// projector), as `source_dir` stores them: written beside the trained language model unchanged.
// None when the folder holds no weights (a model drawn at random from its config).
std::vector<DeferredTensor> carried_tensors(const std::string& source_dir, int64_t& bytes) {
  std::vector<DeferredTensor> out;
  if (!fs::exists(source_dir + "/model.safetensors") &&
      !fs::exists(source_dir + "/model.safetensors.index.json"))
    return out;
  auto reader = std::make_shared<CheckpointReader>(source_dir);
  for (const auto& name : reader->names()) {
    if (model::is_language_model_tensor(name)) continue;
    const at::Tensor t = reader->get(name);  // a view of the mapped file: no copy yet
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
    out.push_back(
        {name, t.scalar_type(), t.sizes().vec(), [reader, name] { return reader->get(name); }});
  }
  return out;
}

}  // namespace

void save_hf_model(model::CausalLM& model, const std::string& out_dir, c10::ScalarType dtype,
                   int64_t max_shard_bytes, const ParameterValue& value_of, bool write) {
  if (model::has_lora(model))
    throw std::runtime_error(out_dir +
                             ": the model still has LoRA adapters; call merge_lora first");
  if (!write) {  // the same values asked for in the same order: the gathers they take part in
    for (const auto& item : model->named_parameters())
      if (value_of) value_of(item.key(), item.value());
    return;
  }
  fs::create_directories(out_dir);
  json config = model->config().raw;
  // The weights written are whole, in `dtype`, whatever the checkpoint read was (bitsandbytes
  // 4-bit, gpt-oss's MXFP4 experts).
  config.erase("quantization_config");
  config["torch_dtype"] = hf_dtype_name(dtype);  // transformers 4 name
  config["dtype"] = hf_dtype_name(dtype);        // transformers 5 name
  if (model->config().wrapped_in_multimodal())
    for (const char* key : {"torch_dtype", "dtype"})
      if (config["text_config"].contains(key)) config["text_config"][key] = hf_dtype_name(dtype);

  // Group parameters into shards of at most max_shard_bytes (a larger tensor gets its own).
  std::vector<std::vector<DeferredTensor>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& item : model->named_parameters()) {
    const int64_t bytes = item.value().numel() * static_cast<int64_t>(c10::elementSize(dtype));
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    append_deferred(model, item.key(), item.value(), dtype, value_of, shards.back());
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  if (model->config().wrapped_in_multimodal()) {  // the vision tower and projector, a shard apart
    auto carried = carried_tensors(model->config().source_dir, total_bytes);
    if (!carried.empty()) shards.push_back(std::move(carried));
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  const std::string index_path = out_dir + "/model.safetensors.index.json";
  if (shards.size() == 1) {
    save_safetensors(out_dir + "/model.safetensors", shards[0], meta);
    fs::remove(index_path);
  } else {
    json weight_map = json::object();
    char name[64];
    for (size_t i = 0; i < shards.size(); ++i) {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      save_safetensors(out_dir + "/" + name, shards[i], meta);
      for (const auto& entry : shards[i]) weight_map[entry.name] = name;
    }
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text_atomic(index_path, index.dump(2));
    fs::remove(out_dir + "/model.safetensors");
  }
  write_text_atomic(out_dir + "/config.json", config.dump(2));
}

void copy_tokenizer_files(const std::string& from_dir, const std::string& to_dir) {
  static const char* kFiles[] = {"tokenizer.json",
                                 "tokenizer_config.json",
                                 "special_tokens_map.json",
                                 "chat_template.jinja",
                                 "generation_config.json",
                                 "tokenizer.model",
                                 "vocab.json",
                                 "merges.txt"};
  fs::create_directories(to_dir);
  for (const char* f : kFiles) {
    fs::path src = fs::path(from_dir) / f;
    if (fs::exists(src))
      fs::copy_file(src, fs::path(to_dir) / f, fs::copy_options::overwrite_existing);
  }
}

}  // namespace kubetune::io
