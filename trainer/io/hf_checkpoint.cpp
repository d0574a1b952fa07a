#include "trainer/io/hf_checkpoint.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>

#include "trainer/io/safetensors.h"
#include "trainer/model/lora.h"

namespace kubetune::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
}

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

// Finds each tensor name in either a single file or the shards of an index, opening shards once.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir) : dir_(dir) {
    const std::string single = dir + "/model.safetensors";
    const std::string index = dir + "/model.safetensors.index.json";
    if (fs::exists(index)) {
      index_path_ = index;
      json j = read_json(index);
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

void load_hf_weights(model::CausalLM& model, const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": model directory does not exist");
  if (!fs::exists(dir + "/config.json"))
    throw std::runtime_error(dir + "/config.json: missing (is this a Hugging Face model folder?)");
  CheckpointReader reader(dir);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    if (is_lora_name(name)) continue;
    at::Tensor src = reader.get(name);
    at::Tensor& dst = item.value();
    if (src.sizes() != dst.sizes())
      throw std::runtime_error(reader.file_of(name) + ": tensor \"" + name + "\" has shape " +
                               shape_text(src.sizes()) + " but the model expects " +
                               shape_text(dst.sizes()));
    dst.copy_(src);
  }
}

void save_hf_model(model::CausalLM& model, const std::string& out_dir, c10::ScalarType dtype,
                   int64_t max_shard_bytes) {
  if (model::has_lora(model))
    throw std::runtime_error(out_dir +
                             ": the model still has LoRA adapters; call merge_lora first");
  fs::create_directories(out_dir);
  json config = model->config().raw;
  config["torch_dtype"] = hf_dtype_name(dtype);  // transformers 4 name
  config["dtype"] = hf_dtype_name(dtype);        // transformers 5 name

  // Group parameters into shards of at most max_shard_bytes (a larger tensor gets its own).
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& item : model->named_parameters()) {
    const int64_t bytes = item.value().numel() * static_cast<int64_t>(c10::elementSize(dtype));
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(item.key(), item.value());
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  auto converted = [&](const std::vector<std::pair<std::string, at::Tensor>>& shard) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& [name, t] : shard) out.emplace_back(name, t.detach().to(at::kCPU, dtype));
    return out;
  };

  const std::string index_path = out_dir + "/model.safetensors.index.json";
  if (shards.size() == 1) {
    save_safetensors(out_dir + "/model.safetensors", converted(shards[0]), meta);
    fs::remove(index_path);
  } else {
    json weight_map = json::object();
    char name[64];
    for (size_t i = 0; i < shards.size(); ++i) {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      save_safetensors(out_dir + "/" + name, converted(shards[i]), meta);
      for (const auto& entry : shards[i]) weight_map[entry.first] = name;
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
