// kubeconfig and in-cluster configuration.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "operator/kube/client_config.h"

namespace kubetune::op::kube {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("kubetune-kc-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

const char* kKubeconfig = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
- name: dev
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: aGVsbG8tY2E=
contexts:
- name: dev
  context: {cluster: dev, user: alice, namespace: ml}
- name: prod
  context: {cluster: prod, user: bob}
users:
- name: alice
  user:
    client-certificate: certs/alice.crt
    client-key-data: a2V5LWJ5dGVz
- name: bob
  user:
    token: s3cr3t
)";

TEST(Kubeconfig, CurrentContextWithClientCertificate) {
  TempDir d;
  const auto cfg = load_kubeconfig(d.write("config", kKubeconfig));
  EXPECT_EQ(cfg.server, "https://127.0.0.1:6443");
  EXPECT_EQ(cfg.ca_data, "hello-ca");
  EXPECT_EQ(cfg.key_data, "key-bytes");
  EXPECT_EQ(cfg.cert_file, (d.path / "certs/alice.crt").string());  // relative to the file
  EXPECT_EQ(cfg.default_namespace, "ml");
  EXPECT_EQ(cfg.bearer_token(), "");
}

TEST(Kubeconfig, NamedContextWithToken) {
  TempDir d;
  const auto cfg = load_kubeconfig(d.write("config", kKubeconfig), "prod");
  EXPECT_EQ(cfg.server, "https://prod.example:6443");
  EXPECT_EQ(cfg.bearer_token(), "s3cr3t");
  EXPECT_EQ(cfg.default_namespace, "default");
}

TEST(Kubeconfig, ErrorsNameTheFileAndWhatIsMissing) {
  TempDir d;
  const std::string path = d.write("config", kKubeconfig);
  try {
    load_kubeconfig(path, "staging");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("no context named \"staging\""), std::string::npos)
        << e.what();
  }
}

TEST(InCluster, ServiceAccountTokenIsReadFreshEachTime) {
  TempDir d;
  d.write("token", "first\n");
  d.write("ca.crt", "PEM");
  d.write("namespace", "kubetune-system");
  setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  const auto cfg = in_cluster_config(d.path.string());
  EXPECT_EQ(cfg.server, "https://10.0.0.1:443");
  EXPECT_EQ(cfg.ca_file, (d.path / "ca.crt").string());
  EXPECT_EQ(cfg.default_namespace, "kubetune-system");
  EXPECT_EQ(cfg.bearer_token(), "first");
  d.write("token", "rotated");
  EXPECT_EQ(cfg.bearer_token(), "rotated");
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  EXPECT_THROW(in_cluster_config(d.path.string()), std::runtime_error);
}

}  // namespace
}  // namespace kubetune::op::kube
