#include "common/metrics/scrape.h"

#include <cpprest/http_client.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "common/metrics/labels.h"
#include "common/metrics/names.h"
#include "common/metrics/text_format.h"

namespace kubetune::metrics {

std::string http_get(const std::string& url, int timeout_ms) {
  try {
    web::http::client::http_client_config config;
    config.set_timeout(std::chrono::milliseconds(timeout_ms));
    web::http::client::http_client client(url, config);
    web::http::http_response response = client.request(web::http::methods::GET).get();
    std::string body = response.extract_utf8string(/*ignore_content_type=*/true).get();
    if (response.status_code() != web::http::status_codes::OK) {
      throw std::runtime_error("GET " + url + ": HTTP status " +
                               std::to_string(response.status_code()) + ": " + body.substr(0, 200));
    }
    return body;
  } catch (const web::http::http_exception& e) {
    throw std::runtime_error("GET " + url + ": " + e.what());
  } catch (const web::uri_exception& e) {
    throw std::runtime_error("GET " + url + ": bad URL: " + e.what());
  }
}

namespace {

// A cursor over one line of the text format; every error names the line number.
class LineParser {
 public:
  LineParser(const std::string& line, int line_number) : s_(line), line_number_(line_number) {}

  // Parses `name{labels} value [timestamp]` and returns (series key, value).
  std::pair<std::string, double> parse_sample() {
    skip_blanks();
    const std::string name = read_name();
    skip_blanks();
    Labels labels;
    if (peek() == '{') labels = read_labels();
    skip_blanks();
    const double value = parse_value(read_token());
    skip_blanks();
    if (!at_end()) read_token();  // optional timestamp (ms); we do not use it
    skip_blanks();
    if (!at_end()) fail("unexpected text after the sample");
    return {series_key(name, labels), value};
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("metrics text line " + std::to_string(line_number_) + ": " + why +
                             ": " + s_.substr(0, 200));
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  void skip_blanks() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  std::string read_name() {
    const std::size_t start = pos_;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
                         s_[pos_] == ':')) {
      ++pos_;
    }
    std::string name = s_.substr(start, pos_ - start);
    if (!is_valid_metric_name(name)) fail("bad metric name \"" + name + "\"");
    return name;
  }

  std::string read_token() {
    const std::size_t start = pos_;
    while (!at_end() && s_[pos_] != ' ' && s_[pos_] != '\t') ++pos_;
    if (start == pos_) fail("missing value");
    return s_.substr(start, pos_ - start);
  }

  std::string read_label_value() {
    expect('"');
    std::string value;
    while (true) {
      if (at_end()) fail("unterminated label value");
      const char c = s_[pos_++];
      if (c == '"') return value;
      if (c != '\\') {
        value += c;
        continue;
      }
      const char escaped = peek();
      ++pos_;
      if (escaped == '\\' || escaped == '"') {
        value += escaped;
      } else if (escaped == 'n') {
        value += '\n';
      } else {
        fail("bad escape in label value");
      }
    }
  }

  Labels read_labels() {
    expect('{');
    Labels labels;
    skip_blanks();
    while (peek() != '}') {
      const std::size_t start = pos_;
      while (!at_end() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
        ++pos_;
      }
      const std::string key = s_.substr(start, pos_ - start);
      if (key.empty()) fail("expected a label name");
      skip_blanks();
      expect('=');
      skip_blanks();
      if (!labels.emplace(key, read_label_value()).second) fail("duplicate label \"" + key + "\"");
      skip_blanks();
      if (peek() == ',') {
        ++pos_;
        skip_blanks();
      } else if (peek() != '}') {
        fail("expected ',' or '}' after a label");
      }
    }
    ++pos_;
    return labels;
  }

  double parse_value(const std::string& token) const {
    if (token == "+Inf" || token == "Inf") return HUGE_VAL;
    if (token == "-Inf") return -HUGE_VAL;
    if (token == "NaN") return std::nan("");
    char* end = nullptr;
    const double v = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) fail("bad value \"" + token + "\"");
    return v;
  }

  const std::string& s_;
  const int line_number_;
  std::size_t pos_ = 0;
};

}  // namespace

ParsedMetrics parse_text_format(const std::string& text) {
  ParsedMetrics out;
  std::size_t start = 0;
  for (int line_number = 1; start < text.size(); ++line_number) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();  // tolerate CRLF pages
    start = end + 1;
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    auto [key, value] = LineParser(line, line_number).parse_sample();
    out[key] = value;
  }
  return out;
}

std::optional<double> first_value(const ParsedMetrics& metrics, const std::string& metric_name) {
  for (auto it = metrics.lower_bound(metric_name); it != metrics.end(); ++it) {
    const std::string& key = it->first;
    if (key == metric_name) return it->second;
    if (key.compare(0, metric_name.size(), metric_name) != 0) break;
    if (key.size() > metric_name.size() && key[metric_name.size()] == '{') return it->second;
  }
  return std::nullopt;
}

}  // namespace kubetune::metrics
