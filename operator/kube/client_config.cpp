#include "operator/kube/client_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kubetune::op::kube {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string base64_decode(const std::string& in, const std::string& where) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    const auto pos = chars.find(c);
    if (pos == std::string::npos) throw std::runtime_error(where + ": invalid base64");
    val = (val << 6) + static_cast<int>(pos);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

// Looks up `name` in a kubeconfig list such as clusters: [{name, cluster: {...}}].
YAML::Node named_entry(const YAML::Node& list, const std::string& name, const std::string& field,
                       const std::string& file) {
  for (const auto& item : list) {
    if (item["name"] && item["name"].as<std::string>() == name) return item[field];
  }
  throw std::runtime_error(file + ": no " + field + " named \"" + name + "\"");
}

std::string str(const YAML::Node& n, const char* key) {
  return n && n[key] ? n[key].as<std::string>() : std::string();
}

std::string resolve(const std::string& file, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(file).parent_path() / path).string();
}

}  // namespace

std::string ClientConfig::bearer_token() const {
  if (!token_file.empty()) return trim(read_file(token_file));
  return token;
}

ClientConfig load_kubeconfig(const std::string& path, const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  const std::string ctx_name = context.empty() ? str(root, "current-context") : context;
  if (ctx_name.empty()) throw std::runtime_error(path + ": current-context is not set");
  const YAML::Node ctx = named_entry(root["contexts"], ctx_name, "context", path);
  const YAML::Node cluster = named_entry(root["clusters"], str(ctx, "cluster"), "cluster", path);
  ClientConfig cfg;
  cfg.server = str(cluster, "server");
  if (cfg.server.empty()) throw std::runtime_error(path + ": cluster has no server");
  cfg.ca_file = resolve(path, str(cluster, "certificate-authority"));
  cfg.ca_data = base64_decode(str(cluster, "certificate-authority-data"), path);
  cfg.insecure_skip_tls_verify =
      cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
  if (!str(ctx, "namespace").empty()) cfg.default_namespace = str(ctx, "namespace");
  if (!str(ctx, "user").empty()) {
    const YAML::Node user = named_entry(root["users"], str(ctx, "user"), "user", path);
    cfg.token = str(user, "token");
    cfg.token_file = resolve(path, str(user, "tokenFile"));
    cfg.cert_file = resolve(path, str(user, "client-certificate"));
    cfg.cert_data = base64_decode(str(user, "client-certificate-data"), path);
    cfg.key_file = resolve(path, str(user, "client-key"));
    cfg.key_data = base64_decode(str(user, "client-key-data"), path);
    if (user && user["exec"]) {
      throw std::runtime_error(path + ": user \"" + str(ctx, "user") +
                               "\": exec credential plugins are not supported; use a token or "
                               "client certificate");
    }
  }
  return cfg;
}

ClientConfig in_cluster_config(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    throw std::runtime_error("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set");
  }
  ClientConfig cfg;
  const std::string h = host;
  cfg.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  cfg.token_file = root + "/token";
  cfg.ca_file = root + "/ca.crt";
  if (fs::exists(root + "/namespace")) cfg.default_namespace = trim(read_file(root + "/namespace"));
  return cfg;
}

ClientConfig default_client_config(const std::string& explicit_kubeconfig) {
  if (!explicit_kubeconfig.empty()) return load_kubeconfig(explicit_kubeconfig);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env) {
    std::string first = env;
    first = first.substr(0, first.find(':'));  // the first file of a list
    return load_kubeconfig(first);
  }
  if (std::getenv("KUBERNETES_SERVICE_HOST")) return in_cluster_config();
  const char* home = std::getenv("HOME");
  const std::string path = std::string(home ? home : "") + "/.kube/config";
  if (fs::exists(path)) return load_kubeconfig(path);
  throw std::runtime_error(
      "no cluster configuration: pass --kubeconfig, set KUBECONFIG, or run in a pod");
}

}  // namespace kubetune::op::kube
