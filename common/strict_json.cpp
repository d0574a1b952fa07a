#include "common/strict_json.h"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <vector>

namespace kubetune {
namespace {

using nlohmann::json;

// The parser callback sees keys and container starts/ends in document order, so one frame per open
// container is enough to find a repeated key and to know where it is.
class DuplicateKeyCheck {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw std::runtime_error("nested deeper than " + std::to_string(kMaxJsonDepth) +
                                   " levels at " + path());
        frames_.push_back({event == json::parse_event_t::object_start, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.current = parsed.get<std::string>();
        if (!f.keys.insert(f.current).second)
          throw std::runtime_error("duplicate key at " + path() +
                                   " (a repeated key would silently replace the first)");
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_object;
    std::unordered_set<std::string> keys;
    std::string current;
  };
  std::string path() const {
    std::string out;
    for (const auto& f : frames_) out += f.is_object ? "/" + json(f.current).dump() : "/[]";
    return out.empty() ? "/" : out;
  }
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
  DuplicateKeyCheck check;
  try {
    return json::parse(text.begin(), text.end(),
                       [&check](int depth, json::parse_event_t event, json& parsed) {
                         return check(depth, event, parsed);
                       });
  } catch (const json::exception& e) {
    throw std::runtime_error(source + ": invalid JSON: " + without_json_exception_tag(e.what()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(source + ": " + e.what());
  }
}

json read_json_file_strict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_json_strict(buffer.str(), path);
}

}  // namespace kubetune
