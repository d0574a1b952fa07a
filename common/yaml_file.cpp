#include "common/yaml_file.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kubetune {
namespace {

using nlohmann::json;

std::string at_line(const std::string& source, const YAML::Mark& mark) {
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// Plain scalars are typed the way YAML 1.2's core schema types them, so `learningRate: 2e-4` is a
// number and `packing: true` a boolean; quoted ones stay strings ("1" is a string).
json scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  try {
    size_t used = 0;
    long long integer = std::stoll(text, &used, 10);
    if (used == text.size()) return integer;
  } catch (const std::exception&) {
  }
  try {
    size_t used = 0;
    double number = std::stod(text, &used);
    if (used == text.size() && text.find_first_of("0123456789") != std::string::npos) return number;
  } catch (const std::exception&) {
  }
  return text;
}

// Converts one document, counting every node it produces: aliases are shared in yaml-cpp's tree,
// so the count, not the text's size, is what bounds the work and memory of the expansion.
class Converter {
 public:
  explicit Converter(const std::string& source) : source_(source) {}

  json convert(const YAML::Node& node, int depth = 0) {
    // An anchor can hold an alias of itself (`a: &x [*x]`): a loop, not only a large expansion.
    if (depth > kMaxYamlDepth)
      throw std::runtime_error(at_line(source_, node.Mark()) + ": nested deeper than " +
                               std::to_string(kMaxYamlDepth) +
                               " levels (an anchor that contains itself?)");
    if (++nodes_ > kMaxYamlNodes)
      throw std::runtime_error(
          at_line(source_, node.Mark()) + ": the document expands to more than " +
          std::to_string(kMaxYamlNodes) + " nodes (aliases referring to aliases?)");
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nullptr;
      case YAML::NodeType::Scalar:
        return scalar_to_json(node);
      case YAML::NodeType::Sequence: {
        json out = json::array();
        for (const auto& item : node) out.push_back(convert(item, depth + 1));
        return out;
      }
      case YAML::NodeType::Map:
        return convert_map(node, depth);
    }
    return nullptr;
  }

 private:
  json convert_map(const YAML::Node& node, int depth) {
    json out = json::object();
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      if (out.contains(key))
        throw std::runtime_error(at_line(source_, kv.first.Mark()) + ": duplicate key \"" + key +
                                 "\" (the second would silently replace the first)");
      out[key] = convert(kv.second, depth + 1);
    }
    return out;
  }

  const std::string& source_;
  long nodes_ = 0;
};

}  // namespace

json yaml_to_json(const std::string& text, const std::string& source_name) {
  try {
    // Empty documents (a file ending in `---`, as helm and kustomize write them) are nothing.
    std::vector<YAML::Node> documents;
    for (const auto& d : YAML::LoadAll(text))
      if (!d.IsNull()) documents.push_back(d);
    if (documents.size() > 1)
      throw std::runtime_error(at_line(source_name, documents[1].Mark()) +
                               ": a second YAML document (after ---); put one per file, the rest "
                               "would be ignored");
    if (documents.empty()) return nullptr;
    return Converter(source_name).convert(documents[0]);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(at_line(source_name, e.mark) + ": " + e.msg);
  }
}

json load_yaml_or_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return yaml_to_json(buffer.str(), path);  // JSON is valid YAML
}

}  // namespace kubetune
