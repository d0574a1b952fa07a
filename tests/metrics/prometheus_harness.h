#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/metrics/labels.h"

// Starts a throw-away Prometheus server for tests: loopback only, a free port, temporary storage
// and a generated scrape config. Reusable for scraping real multi-rank training runs.
namespace kubetune::metrics::testing {

struct PrometheusOptions {
  std::string binary = "/usr/bin/prometheus";
  // host:port of each /metrics endpoint, all in one scrape job.
  std::vector<std::string> targets;
  std::string scrape_job = "kubetune";
  double scrape_interval_s = 1;
  // Extra target labels added to every scraped series (e.g. {"namespace", "ml"}, as Kubernetes
  // service discovery would).
  Labels target_labels;
  // Keep the exporters' `job` label instead of renaming it to exported_job (what the chart's
  // ServiceMonitor does, see trainer_series.h).
  bool honor_labels = true;
  std::chrono::milliseconds ready_timeout{15000};
};

// One element of an instant-query result.
struct PromSample {
  Labels labels;  // includes __name__ when the query keeps it
  double value = 0;
};

class PrometheusServer {
 public:
  // True when `binary` exists and is executable; tests GTEST_SKIP() otherwise.
  static bool available(const std::string& binary = "/usr/bin/prometheus");

  // Starts Prometheus and waits for /-/ready. Throws std::runtime_error (with the tail of the
  // Prometheus log) if it does not come up within ready_timeout.
  explicit PrometheusServer(PrometheusOptions options);
  // Stops Prometheus (SIGTERM, then SIGKILL after 5 s) and deletes its temporary directory.
  ~PrometheusServer();
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // GET /api/v1/query; vector and scalar results. Throws on HTTP or query errors.
  std::vector<PromSample> query(const std::string& promql) const;

  // Repeats `query` every 200 ms until `done(result)` is true; returns the last result. Throws
  // std::runtime_error naming the query if `timeout` passes first.
  std::vector<PromSample> wait_for(const std::string& promql,
                                   const std::function<bool(const std::vector<PromSample>&)>& done,
                                   std::chrono::milliseconds timeout) const;

  // Waits until every target has been scraped successfully once (up == 1). Prometheus applies
  // new targets only every ~5 s after start, so call this before producing data that must be
  // seen by several scrapes.
  void wait_until_scraped(std::chrono::milliseconds timeout) const;

  // Last bytes of Prometheus' own log, for failure messages.
  std::string log_tail(std::size_t max_bytes = 4000) const;

 private:
  void write_config(const PrometheusOptions& options) const;
  void spawn(const PrometheusOptions& options);
  void wait_ready(std::chrono::milliseconds timeout);
  void stop();

  std::string dir_;  // temporary directory: config, storage, log
  int port_ = 0;
  pid_t pid_ = -1;
  std::size_t target_count_ = 0;
};

}  // namespace kubetune::metrics::testing
