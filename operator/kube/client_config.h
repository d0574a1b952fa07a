// Where the API server is and how to authenticate to it: from a kubeconfig file (token, client
// certificate, CA; inline *-data or file paths relative to the kubeconfig) or from inside a pod
// (service-account token and CA, KUBERNETES_SERVICE_HOST/PORT).
#pragma once

#include <chrono>
#include <string>

namespace kubetune::op::kube {

struct ClientConfig {
  std::string server;  // "https://host:port" (or http:// for the test double)
  std::string token;
  std::string token_file;        // re-read on each request: projected tokens rotate
  std::string ca_file, ca_data;  // PEM
  std::string cert_file, cert_data;
  std::string key_file, key_data;
  bool insecure_skip_tls_verify = false;
  // Client-side limits (rate_limiter.h): requests per second on average, and at once; qps 0 sends
  // every request at once. Not from the kubeconfig: the operator's --kube-api-qps/-burst.
  double qps = 0;
  int burst = 0;
  std::string default_namespace = "default";
  // How long one request (not a watch) may take before it fails.
  std::chrono::seconds request_timeout{30};

  // The bearer token to send now ("" when none).
  std::string bearer_token() const;
};

// Reads a kubeconfig; `context` "" means its current-context. Errors name the file and field.
ClientConfig load_kubeconfig(const std::string& path, const std::string& context = "");

// The service account's view from inside a pod; `root` is /var/run/secrets/kubernetes.io/
// serviceaccount (a parameter so tests can point it elsewhere).
ClientConfig in_cluster_config(
    const std::string& root = "/var/run/secrets/kubernetes.io/serviceaccount");

// client-go's order: an explicit path, then $KUBECONFIG, then in-cluster, then ~/.kube/config.
ClientConfig default_client_config(const std::string& explicit_kubeconfig = "");

}  // namespace kubetune::op::kube
