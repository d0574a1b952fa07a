#include "common/yaml_file.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
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

// Offset of the first byte that is not part of well-formed UTF-8 (RFC 3629), or npos. YAML text is
// Unicode; invalid bytes would reach JSON strings that nlohmann refuses to print later, far from
// the file.
size_t first_invalid_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    if (len == 0 || i + len > n || (len == 2 && c < 0xC2)) return i;
    for (size_t k = 1; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    if (len == 3 && ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] >= 0xA0))) return i;
    if (len == 4 && ((c == 0xF0 && p[i + 1] < 0x90) || c > 0xF4 || (c == 0xF4 && p[i + 1] >= 0x90)))
      return i;
    i += len;
  }
  return std::string::npos;
}

void check_utf8(const std::string& text, const std::string& source) {
  const size_t bad = first_invalid_utf8(text);
  if (bad == std::string::npos) return;
  const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + bad, '\n'));
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[bad]));
  throw std::runtime_error(source + ":" + std::to_string(line) + ": not UTF-8 (byte " + byte +
                           " at offset " + std::to_string(bad) + ")");
}

// Walks the documents of a text without building them, to find a second non-empty one. (yaml-cpp's
// LoadAll is not used: on some stray text after a flow document, `{a: 1}\n},`, it loops forever,
// allocating; YAML::Load alone would ignore that text.)
class DocumentScan : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    start_ = mark;
    has_content_ = false;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { has_content_ = true; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    has_content_ = true;
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    has_content_ = true;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    has_content_ = true;
  }
  void OnMapEnd() override {}

  bool has_content() const { return has_content_; }
  const YAML::Mark& start() const { return start_; }

 private:
  YAML::Mark start_;
  bool has_content_ = false;
};

// Throws unless `text` holds at most one non-empty document (empty ones, as a trailing `---`
// makes, are nothing).
void check_single_document(const std::string& text, const std::string& source) {
  constexpr int kMaxDocuments = 64;  // of any kind; more is garbage yaml-cpp keeps re-reading
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  DocumentScan scan;
  int documents = 0, with_content = 0;
  while (parser.HandleNextDocument(scan)) {
    if (++documents > kMaxDocuments)
      throw std::runtime_error(at_line(source, scan.start()) +
                               ": text that does not parse as YAML after the first document");
    if (scan.has_content() && ++with_content > 1)
      throw std::runtime_error(at_line(source, scan.start()) +
                               ": a second YAML document (after ---, or text after the first "
                               "one ends); put one per file, the rest would be ignored");
  }
}

}  // namespace

json yaml_to_json(const std::string& text, const std::string& source_name) {
  try {
    check_utf8(text, source_name);
    check_single_document(text, source_name);
    const YAML::Node document = YAML::Load(text);
    if (document.IsNull()) return nullptr;
    return Converter(source_name).convert(document);
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
