// The trainer's Prometheus observer on its own: StepStats in, /metrics page out (fetched over HTTP
// and parsed). Expected values are computed from the StepStats the test feeds in.
#include "trainer/metrics/prometheus_observer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/metrics/scrape.h"
#include "common/metrics/text_format.h"
#include "common/metrics/trainer_series.h"

namespace kubetune::train {
namespace {

namespace ts = metrics::trainer_series;

bool is_gpu_series(std::string_view name) {
  return name == ts::kMfuRatio || name.rfind("kubetune_gpu_", 0) == 0;
}

PrometheusObserver::Options options(int rank, int local_rank) {
  PrometheusObserver::Options o;
  o.job = "unit-job";
  o.rank = rank;
  o.local_rank = local_rank;
  o.address = "127.0.0.1";
  o.port = 0;
  return o;
}

metrics::ParsedMetrics scrape(const PrometheusObserver& observer) {
  return metrics::parse_text_format(
      metrics::http_get("http://127.0.0.1:" + std::to_string(observer.port()) + "/metrics", 5000));
}

metrics::Labels rank_labels(int rank, int local_rank) {
  return {{"job", "unit-job"},
          {"rank", std::to_string(rank)},
          {"local_rank", std::to_string(local_rank)}};
}

std::optional<double> value(const metrics::ParsedMetrics& page, std::string_view name,
                            metrics::Labels labels) {
  auto it = page.find(metrics::series_key(std::string(name), labels));
  if (it == page.end()) return std::nullopt;
  return it->second;
}

// Number of series on the page whose name is `name` (any labels).
int count_series(const metrics::ParsedMetrics& page, std::string_view name) {
  int n = 0;
  for (const auto& [key, v] : page) {
    const std::string series = key.substr(0, key.find('{'));
    n += series == name ? 1 : 0;
  }
  return n;
}

StepStats step_stats(int64_t step) {
  StepStats s;
  s.step = step;
  s.total_steps = 10;
  s.epoch = 0.1 * static_cast<double>(step);
  s.loss = 3.0 - 0.25 * static_cast<double>(step);
  s.learning_rate = 1e-3 / static_cast<double>(step);
  s.grad_norm = 0.5 * static_cast<double>(step);
  s.local_tokens = 100 + step;
  s.global_tokens = 2 * s.local_tokens + 7;
  s.local_samples = 4;
  s.step_seconds = 0.125 * static_cast<double>(step);
  s.data_seconds = 0.01;
  s.forward_backward_seconds = 0.0625;
  s.allreduce_wait_seconds = 0.03125;
  s.optimizer_seconds = 0.015625;
  s.eta_seconds = 10.0 - static_cast<double>(step);
  s.tokens_per_second = 1000.0 + static_cast<double>(step);
  s.mfu = 0.375;
  s.expert_tokens = {2.0 * static_cast<double>(step), 1.0};  // a mixture of two experts
  s.preference = PreferenceStats{0.25, -0.5, 0.75, 1.0, -10.0, -20.0, 0.125};  // preference
  return s;
}

TEST(PrometheusObserver, CountersStartAtZeroAndGaugesAppearWithTheFirstStep) {
  PrometheusObserver observer(options(3, 1));
  const auto page = scrape(observer);
  const auto labels = rank_labels(3, 1);
  EXPECT_EQ(value(page, ts::kTokensTotal, labels), 0.0);
  EXPECT_EQ(value(page, ts::kSamplesTotal, labels), 0.0);
  EXPECT_EQ(value(page, ts::kCheckpointsTotal, labels), 0.0);
  EXPECT_EQ(value(page, ts::kCollectiveTimeoutsTotal, labels), 0.0);
  EXPECT_EQ(value(page, std::string(ts::kStepSeconds) + "_count", labels), 0.0);
  // A loss of 0 before the first step would be a lie: the gauge is absent instead.
  EXPECT_EQ(count_series(page, ts::kTrainLoss), 0);
  EXPECT_EQ(count_series(page, ts::kStep), 0);
}

TEST(PrometheusObserver, ExportsEveryCpuSeriesWithItsLabelsAndNoGpuSeries) {
  PrometheusObserver observer(options(1, 0));
  double tokens = 0, samples = 0;
  for (int64_t step = 1; step <= 3; ++step) {
    const StepStats s = step_stats(step);
    observer.on_step(s);
    tokens += static_cast<double>(s.local_tokens);
    samples += static_cast<double>(s.local_samples);
  }
  observer.on_micro_batch(4, 2, false);  // the trainer's at start
  observer.on_eval(3, 1.75);
  observer.on_checkpoint(2, "/tmp/ckpt-2");
  observer.on_checkpoint(3, "/tmp/ckpt-3");
  const auto page = scrape(observer);
  const auto labels = rank_labels(1, 0);

  for (const metrics::SeriesSpec& spec : ts::kAll) {
    if (is_gpu_series(spec.name)) {
      EXPECT_EQ(count_series(page, spec.name), 0) << spec.name << " must be absent on CPU";
      continue;
    }
    if (spec.type == metrics::MetricType::kHistogram) {
      EXPECT_TRUE(value(page, std::string(spec.name) + "_count", labels)) << spec.name;
    } else if (spec.name == ts::kExpertTokensTotal) {
      for (const std::string expert : {"0", "1"}) {
        auto with_expert = labels;
        with_expert["expert"] = expert;
        EXPECT_TRUE(value(page, spec.name, with_expert)) << spec.name << " expert " << expert;
      }
      auto first = labels;
      first["expert"] = "0";
      EXPECT_EQ(value(page, spec.name, first), 2.0 + 4.0 + 6.0);  // summed over the steps
    } else if (spec.name == ts::kPreferenceReward || spec.name == ts::kPreferenceLogProb) {
      for (std::string_view answer : ts::kPreferenceAnswers) {
        auto with_answer = labels;
        with_answer["answer"] = std::string(answer);
        EXPECT_TRUE(value(page, spec.name, with_answer)) << spec.name << " answer " << answer;
      }
    } else if (spec.name == ts::kStepPhaseSecondsTotal) {
      for (std::string_view phase : ts::kStepPhases) {
        auto with_phase = labels;
        with_phase["phase"] = std::string(phase);
        EXPECT_TRUE(value(page, spec.name, with_phase)) << spec.name << " phase " << phase;
      }
    } else {
      EXPECT_TRUE(value(page, spec.name, labels)) << spec.name << " missing or mislabelled";
    }
  }

  const StepStats last = step_stats(3);
  EXPECT_EQ(value(page, ts::kTokensTotal, labels), tokens);  // local tokens, not global
  EXPECT_EQ(value(page, ts::kSamplesTotal, labels), samples);
  EXPECT_EQ(value(page, ts::kStep, labels), 3.0);
  EXPECT_EQ(value(page, ts::kTotalSteps, labels), 10.0);
  // prometheus-cpp's text format carries 16 significant digits: equal to the last bit but one.
  const auto same = [](std::optional<double> got, double want) {
    ASSERT_TRUE(got.has_value());
    EXPECT_NEAR(*got, want, 1e-15 * std::fabs(want));
  };
  same(value(page, ts::kTrainLoss, labels), last.loss);
  same(value(page, ts::kLearningRate, labels), last.learning_rate);
  same(value(page, ts::kGradNorm, labels), last.grad_norm);
  same(value(page, ts::kEpoch, labels), last.epoch);
  same(value(page, ts::kEtaSeconds, labels), last.eta_seconds);
  same(value(page, ts::kTokensPerSecond, labels), last.tokens_per_second);
  same(value(page, ts::kSamplesPerSecond, labels),
       static_cast<double>(last.local_samples) / last.step_seconds);
  EXPECT_EQ(value(page, ts::kEvalLoss, labels), 1.75);
  EXPECT_EQ(value(page, ts::kCheckpointsTotal, labels), 2.0);
  EXPECT_EQ(value(page, std::string(ts::kStepSeconds) + "_count", labels), 3.0);
  EXPECT_EQ(value(page, std::string(ts::kStepSeconds) + "_sum", labels), 0.125 * (1 + 2 + 3));
  // Phases accumulate: three steps of each.
  const std::pair<std::string_view, double> phases[] = {{"data_wait", 3 * 0.01},
                                                        {"forward_backward", 3 * 0.0625},
                                                        {"allreduce_wait", 3 * 0.03125},
                                                        {"optimizer", 3 * 0.015625}};
  for (const auto& [phase, seconds] : phases) {
    auto with_phase = labels;
    with_phase["phase"] = std::string(phase);
    ASSERT_TRUE(value(page, ts::kStepPhaseSecondsTotal, with_phase)) << phase;
    EXPECT_DOUBLE_EQ(*value(page, ts::kStepPhaseSecondsTotal, with_phase), seconds) << phase;
  }
}

TEST(PrometheusObserver, GpuSeriesCarryTheDeviceLabel) {
  auto o = options(2, 1);
  o.gpu_device = "cuda:1";
  o.read_memory = [](DeviceMemory& m) {
    m = {1000, 2000, 1500, 80000};
    return true;
  };
  PrometheusObserver observer(std::move(o));
  observer.on_step(step_stats(1));
  const auto page = scrape(observer);
  auto labels = rank_labels(2, 1);
  EXPECT_EQ(value(page, ts::kMfuRatio, labels), 0.375);
  labels["device"] = "cuda:1";
  EXPECT_EQ(value(page, ts::kGpuMemoryAllocatedBytes, labels), 1000.0);
  EXPECT_EQ(value(page, ts::kGpuMemoryReservedBytes, labels), 2000.0);
  EXPECT_EQ(value(page, ts::kGpuMemoryPeakBytes, labels), 1500.0);
  EXPECT_EQ(value(page, ts::kGpuMemoryTotalBytes, labels), 80000.0);
}

TEST(PrometheusObserver, NoMemorySeriesWhenTheDeviceReportsNone) {
  auto o = options(0, 0);
  o.gpu_device = "cuda:0";
  o.read_memory = [](DeviceMemory&) { return false; };
  PrometheusObserver observer(std::move(o));
  observer.on_step(step_stats(1));
  const auto page = scrape(observer);
  EXPECT_EQ(count_series(page, ts::kGpuMemoryAllocatedBytes), 0);
  EXPECT_EQ(count_series(page, ts::kGpuMemoryTotalBytes), 0);
}

TEST(PrometheusObserver, FinishKeepsServingForTheLingerTime) {
  auto o = options(0, 0);
  o.linger_seconds = 0.5;
  PrometheusObserver observer(std::move(o));
  observer.on_step(step_stats(1));
  const auto start = std::chrono::steady_clock::now();
  observer.on_finish(step_stats(1));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 5.0);
}

TEST(PrometheusObserver, BusyPortIsReportedAgainstMetricsPort) {
  PrometheusObserver first(options(0, 0));
  auto o = options(0, 0);
  o.port = first.port();
  try {
    PrometheusObserver second(std::move(o));
    FAIL() << "a second exporter on port " << first.port() << " should not start";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.port"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kubetune::train
