// A real Prometheus scrapes an HttpEndpoint serving prometheus-cpp registries while this program
// updates metrics; the values and labels Prometheus stored are checked through its HTTP query API.
// Prometheus is the reference parser of the text format we serve (prometheus-cpp's) here. Skipped
// when /usr/bin/prometheus is not installed.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <thread>

#include "common/metrics/http_endpoint.h"
#include "common/metrics/operator_series.h"
#include "common/metrics/spec_families.h"
#include "common/metrics/trainer_series.h"
#include "example_series.h"
#include "prometheus_harness.h"

namespace kubetune::metrics::testing {
namespace {

using std::chrono::milliseconds;

bool has_one(const std::vector<PromSample>& result) { return result.size() == 1; }

class PrometheusScrape : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PrometheusServer::available()) GTEST_SKIP() << "/usr/bin/prometheus is not installed";
    exposer_ = std::make_unique<HttpEndpoint>("127.0.0.1", 0);
    exposer_->add_registry(registry_);
  }

  std::unique_ptr<PrometheusServer> start_prometheus() {
    PrometheusOptions options;
    options.targets = {"127.0.0.1:" + std::to_string(exposer_->port())};
    options.target_labels = {{"namespace", "ml"}};
    return std::make_unique<PrometheusServer>(options);
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<HttpEndpoint> exposer_;
};

TEST_F(PrometheusScrape, CountersGaugesAndHistogramsArriveWithLabelsAndExactValues) {
  const Labels rank0 = {{"job", "ft-prom"}, {"rank", "0"}, {"local_rank", "0"}};
  const Labels rank1 = {{"job", "ft-prom"}, {"rank", "1"}, {"local_rank", "0"}};
  auto& tokens = counter_family(*registry_, trainer_series::kAll, trainer_series::kTokensTotal);
  auto& step = gauge_family(*registry_, trainer_series::kAll, trainer_series::kStep);
  auto& step_seconds =
      histogram_family(*registry_, trainer_series::kAll, trainer_series::kStepSeconds);
  prometheus::Counter& tokens0 = tokens.Add(rank0);
  prometheus::Counter& tokens1 = tokens.Add(rank1);
  prometheus::Gauge& step0 = step.Add(rank0);
  prometheus::Histogram& step_seconds0 = step_seconds.Add(
      rank0, prometheus::Histogram::BucketBoundaries(trainer_series::kStepSecondsBuckets.begin(),
                                                     trainer_series::kStepSecondsBuckets.end()));
  step0.Set(0);

  auto prometheus = start_prometheus();
  prometheus->wait_until_scraped(milliseconds(10000));

  // The "training loop": 3 s of steps while Prometheus scrapes every second.
  constexpr int kSteps = 150;
  std::thread trainer([&] {
    for (int i = 1; i <= kSteps; ++i) {
      tokens0.Increment(512);
      tokens1.Increment(256);
      step0.Set(i);
      step_seconds0.Observe(i % 3 == 0 ? 0.3 : 0.07);
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  trainer.join();
  const double expected0 = 512.0 * kSteps;
  const double expected1 = 256.0 * kSteps;
  ASSERT_EQ(tokens0.Value(), expected0);

  const auto final0 = prometheus->wait_for(
      "kubetune_tokens_total{job=\"ft-prom\",rank=\"0\"}",
      [&](const auto& r) { return has_one(r) && r[0].value == expected0; }, milliseconds(10000));
  EXPECT_EQ(final0[0].labels,
            (Labels{{"__name__", "kubetune_tokens_total"},
                    {"job", "ft-prom"},
                    {"rank", "0"},
                    {"local_rank", "0"},
                    {"namespace", "ml"},
                    {"instance", "127.0.0.1:" + std::to_string(exposer_->port())}}));
  EXPECT_EQ(prometheus->query("kubetune_tokens_total{job=\"ft-prom\",rank=\"1\"}").at(0).value,
            expected1);
  EXPECT_EQ(prometheus->query("kubetune_step{job=\"ft-prom\"}").at(0).value, kSteps);
  EXPECT_EQ(prometheus->query("kubetune_step_seconds_count{job=\"ft-prom\"}").at(0).value, kSteps);
  EXPECT_EQ(
      prometheus->query("kubetune_step_seconds_bucket{job=\"ft-prom\",le=\"0.1\"}").at(0).value,
      kSteps - kSteps / 3);
  // histogram_quantile() accepts our buckets: the median step is in the (0.05, 0.1] bucket.
  const double median =
      prometheus->query("histogram_quantile(0.5, kubetune_step_seconds_bucket{job=\"ft-prom\"})")
          .at(0)
          .value;
  EXPECT_GT(median, 0.05);
  EXPECT_LE(median, 0.1);
  // Scrapes happened while the values were changing, not just once at the end.
  EXPECT_GE(prometheus->query("count_over_time(kubetune_step{job=\"ft-prom\"}[1m])").at(0).value,
            2);
  // With honor_labels the exporter's job label wins; the target's own `up` keeps the scrape job.
  EXPECT_EQ(prometheus->query("up{job=\"kubetune\"}").at(0).value, 1);
}

// Label values with quotes, backslashes, newlines and UTF-8 come back unchanged from Prometheus,
// so our escaping matches the reference parser.
TEST_F(PrometheusScrape, EscapedLabelValuesRoundTrip) {
  const std::string odd = "we\"ird\\ job\nnäme";
  gauge_family(*registry_, trainer_series::kAll, trainer_series::kEvalLoss)
      .Add({{"job", odd}, {"rank", "7"}, {"local_rank", "0"}})
      .Set(0.125);
  auto prometheus = start_prometheus();
  const auto result =
      prometheus->wait_for("kubetune_eval_loss{rank=\"7\"}", has_one, milliseconds(10000));
  EXPECT_EQ(result[0].labels.at("job"), odd);
  EXPECT_EQ(result[0].value, 0.125);
}

// Every series of the trainer and operator tables is ingested with the labels the table promises.
TEST_F(PrometheusScrape, AllTableSeriesAreIngestedWithTheirLabels) {
  populate_all_series(*registry_, "ft-all");
  auto prometheus = start_prometheus();
  prometheus->wait_until_scraped(milliseconds(10000));
  auto check = [&](const SeriesSpec& spec) {
    std::string name(spec.name);
    if (spec.type == MetricType::kHistogram) name += "_count";
    const auto result = prometheus->query(name);
    ASSERT_FALSE(result.empty()) << name;
    for (const PromSample& sample : result) {
      for (const std::string& label : label_names(spec)) {
        EXPECT_TRUE(sample.labels.count(label)) << name << " lacks label " << label;
      }
    }
  };
  for (const auto& spec : trainer_series::kAll) check(spec);
  for (const auto& spec : operator_series::kAll) check(spec);
}

}  // namespace
}  // namespace kubetune::metrics::testing
