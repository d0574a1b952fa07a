#include "common/strict_json.h"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <vector>

namespace kubetune {
namespace {

using nlohmann::json;
using DomBuilder = nlohmann::detail::json_sax_dom_parser<json>;

// nlohmann's own document builder, with two checks on the way: a key repeated within one object,
// and nesting past kMaxJsonDepth. (A parser callback could do the same, but nlohmann then rescans
// each parent container whenever an object closes: quadratic in a long array of objects.)
class StrictSax {
 public:
  explicit StrictSax(json& result) : dom_(result) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    return dom_.number_float(v, s);
  }
  bool string(std::string& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }

  bool start_object(std::size_t n) {
    open(true);
    return dom_.start_object(n);
  }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    f.current = k;
    if (!f.keys.insert(k).second)
      throw std::runtime_error("duplicate key at " + path() +
                               " (a repeated key would silently replace the first)");
    return dom_.key(k);
  }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    open(false);
    return dom_.start_array(n);
  }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, token, e);  // throws it
  }

 private:
  struct Frame {
    bool is_object;
    std::unordered_set<std::string> keys;
    std::string current;
  };

  void open(bool is_object) {
    if (static_cast<int>(frames_.size()) >= kMaxJsonDepth)
      throw std::runtime_error("nested deeper than " + std::to_string(kMaxJsonDepth) +
                               " levels at " + path());
    frames_.push_back({is_object, {}, {}});
  }

  std::string path() const {
    std::string out;
    for (const auto& f : frames_) out += f.is_object ? "/" + json(f.current).dump() : "/[]";
    return out.empty() ? "/" : out;
  }

  DomBuilder dom_;
  std::vector<Frame> frames_;
};

}  // namespace

std::string without_json_exception_tag(const std::string& what) {
  if (!what.empty() && what.front() == '[') {
    const size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

json parse_json_strict(std::string_view text, const std::string& source) {
  json result;
  StrictSax sax(result);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {
    throw std::runtime_error(source + ": invalid JSON: " + without_json_exception_tag(e.what()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(source + ": " + e.what());
  }
  return result;
}

json read_json_file_strict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_json_strict(buffer.str(), path);
}

}  // namespace kubetune
