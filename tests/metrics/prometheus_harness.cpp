#include "prometheus_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/metrics/free_port.h"
#include "common/metrics/scrape.h"
#include "common/metrics/text_format.h"

namespace kubetune::metrics::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string make_temp_dir() {
  std::string pattern = (fs::temp_directory_path() / "kubetune-prometheus-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory for Prometheus");
  }
  return pattern;
}

// Percent-encoding for a query-string value (RFC 3986 unreserved characters pass through).
std::string url_encode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// YAML double-quoted scalar; JSON string escaping is valid YAML.
std::string yaml_quote(const std::string& text) { return nlohmann::json(text).dump(); }

double parse_prom_value(const nlohmann::json& pair) {
  const std::string text = pair.at(1).get<std::string>();
  if (text == "+Inf") return HUGE_VAL;
  if (text == "-Inf") return -HUGE_VAL;
  return std::strtod(text.c_str(), nullptr);  // also reads "NaN"
}

}  // namespace

bool PrometheusServer::available(const std::string& binary) {
  return ::access(binary.c_str(), X_OK) == 0;
}

PrometheusServer::PrometheusServer(PrometheusOptions options)
    : dir_(make_temp_dir()), target_count_(options.targets.size()) {
  try {
    write_config(options);
    spawn(options);
    wait_ready(options.ready_timeout);
  } catch (...) {
    stop();
    throw;
  }
}

PrometheusServer::~PrometheusServer() { stop(); }

void PrometheusServer::write_config(const PrometheusOptions& options) const {
  std::ofstream config(dir_ + "/prometheus.yml");
  const std::string interval =
      std::to_string(static_cast<int>(options.scrape_interval_s * 1000)) + "ms";
  config << "global:\n"
         << "  scrape_interval: " << interval << "\n"
         << "  evaluation_interval: " << interval << "\n"
         << "scrape_configs:\n"
         << "  - job_name: " << yaml_quote(options.scrape_job) << "\n"
         << "    honor_labels: " << (options.honor_labels ? "true" : "false") << "\n"
         << "    scrape_timeout: " << interval << "\n"
         << "    static_configs:\n"
         << "      - targets: [";
  for (std::size_t i = 0; i < options.targets.size(); ++i) {
    config << (i ? ", " : "") << yaml_quote(options.targets[i]);
  }
  config << "]\n        labels: {";
  bool first = true;
  for (const auto& [key, value] : options.target_labels) {
    config << (first ? "" : ", ") << key << ": " << yaml_quote(value);
    first = false;
  }
  config << "}\n";
  if (!config) throw std::runtime_error("cannot write " + dir_ + "/prometheus.yml");
}

void PrometheusServer::spawn(const PrometheusOptions& options) {
  port_ = pick_free_port("127.0.0.1");
  std::vector<std::string> args = {
      options.binary,
      "--config.file=" + dir_ + "/prometheus.yml",
      "--storage.tsdb.path=" + dir_ + "/data",
      "--web.listen-address=127.0.0.1:" + std::to_string(port_),
      "--log.level=warn",
  };
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls
  // are allowed because this process runs other threads (cpprestsdk's pool).
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir_ + "/prometheus.log";
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot create " + log);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);  // keep terminal signals meant for the test away from Prometheus
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (pid_ < 0) throw std::runtime_error("fork failed starting Prometheus");
}

void PrometheusServer::wait_ready(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("Prometheus exited during start-up:\n" + log_tail());
    }
    try {
      http_get(url() + "/-/ready", 500);
      return;
    } catch (const std::runtime_error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  throw std::runtime_error("Prometheus not ready at " + url() + " after " +
                           std::to_string(timeout.count()) + " ms:\n" + log_tail());
}

void PrometheusServer::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    pid_ = -1;
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
    dir_.clear();
  }
}

void PrometheusServer::wait_until_scraped(std::chrono::milliseconds timeout) const {
  wait_for(
      "up == 1", [&](const std::vector<PromSample>& r) { return r.size() == target_count_; },
      timeout);
}

std::string PrometheusServer::log_tail(std::size_t max_bytes) const {
  std::ifstream in(dir_ + "/prometheus.log");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  return text.size() > max_bytes ? text.substr(text.size() - max_bytes) : text;
}

std::vector<PromSample> PrometheusServer::query(const std::string& promql) const {
  const std::string body = http_get(url() + "/api/v1/query?query=" + url_encode(promql), 5000);
  const nlohmann::json reply = nlohmann::json::parse(body);
  if (reply.value("status", "") != "success") {
    throw std::runtime_error("query " + promql + " failed: " + body);
  }
  const nlohmann::json& data = reply.at("data");
  std::vector<PromSample> out;
  if (data.at("resultType") == "scalar") {
    out.push_back({{}, parse_prom_value(data.at("result"))});
    return out;
  }
  for (const nlohmann::json& item : data.at("result")) {
    PromSample sample;
    for (const auto& [key, value] : item.at("metric").items()) sample.labels[key] = value;
    sample.value = parse_prom_value(item.at("value"));
    out.push_back(std::move(sample));
  }
  return out;
}

std::vector<PromSample> PrometheusServer::wait_for(
    const std::string& promql, const std::function<bool(const std::vector<PromSample>&)>& done,
    std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  std::vector<PromSample> result;
  while (true) {
    result = query(promql);
    if (done(result)) return result;
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::string last;
  for (const auto& s : result)
    last += series_key("", s.labels) + " " + std::to_string(s.value) + "\n";
  throw std::runtime_error("timed out after " + std::to_string(timeout.count()) +
                           " ms waiting for: " + promql + "\nlast result:\n" + last +
                           log_tail(1500));
}

}  // namespace kubetune::metrics::testing
