// A real Prometheus scrapes a real training run: `kubetune-trainer launch --nproc-per-node 2` on
// CPU with metrics.port set, scraped every second with honor_labels. Afterwards the test reads
// Prometheus' HTTP API and compares with what the run itself recorded (metrics_history.jsonl,
// written by rank 0): every CPU series on both ranks with its labels, no GPU series, the loss
// going down, the token counter exactly equal to the tokens trained, the final step.
//
// Usage (from ctest): kubetune_train_metrics_run_test --trainer BIN --repo DIR --prometheus BIN
//                     [--promtool BIN]. Exit 77 (ctest SKIPPED) when Prometheus is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "child_process.h"
#include "common/metrics/free_port.h"
#include "common/metrics/http_endpoint.h"
#include "common/metrics/scrape.h"
#include "common/metrics/trainer_series.h"
#include "prometheus_harness.h"

namespace kubetune::testing {
namespace {

namespace fs = std::filesystem;
namespace ts = metrics::trainer_series;
using metrics::testing::PrometheusOptions;
using metrics::testing::PrometheusServer;
using metrics::testing::PromSample;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct Paths {
  std::string trainer, repo, prometheus, promtool;
};
Paths g_paths;

// The run: ~20 s of steps at ~10 steps/s on a 2-core machine (~20 scrapes), within the 90 s budget
// on a busy one too.
constexpr int kMaxSteps = 200;
constexpr int kCheckpointEvery = 50;  // checkpoints at 50, 100, 150 and the final one at 200
// Every checkpoint is kept: this test is about metrics, not pruning (which crashed in a tree
// where libtorch's std::filesystem copy was bound; fixed since in 48ced52).
constexpr int kKeepCheckpoints = 5;
constexpr int kEvalEvery = 100;
constexpr int kLingerSeconds = 4;
constexpr auto kBudget = std::chrono::seconds(90);

bool is_gpu_series(std::string_view name) {
  return name == ts::kMfuRatio || name.rfind("kubetune_gpu_", 0) == 0;
}

// Time left of the whole test's budget, never negative.
class Deadline {
 public:
  explicit Deadline(Clock::duration budget) : end_(Clock::now() + budget) {}
  milliseconds left() const {
    return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(end_ - Clock::now()));
  }
  milliseconds at_most(milliseconds wanted) const { return std::min(wanted, left()); }

 private:
  Clock::time_point end_;
};

// A port P with P + 1 free too: local rank r serves on metrics.port + r.
int pick_port_pair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int p = metrics::pick_free_port("127.0.0.1");
    if (p >= 65535) continue;
    try {
      // Binding P + 1 ourselves is the only reliable "is it free" test; the endpoint retries not.
      metrics::HttpEndpoint probe("127.0.0.1", p + 1);
      return p;
    } catch (const std::exception&) {
    }
  }
  throw std::runtime_error("no two adjacent free ports found");
}

// A fresh directory under $TMPDIR (or /tmp), removed when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kt-train-metrics-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The first `n` lines of the example validation set: the final evaluation stays short.
void write_validation_subset(const std::string& from, const std::string& to, int n) {
  std::ifstream in(from);
  std::ofstream out(to);
  std::string line;
  for (int i = 0; i < n && std::getline(in, line); ++i) out << line << "\n";
}

nlohmann::json training_config(const std::string& dir, int metrics_port) {
  const std::string examples = g_paths.repo + "/examples/default";
  return {
      {"model", {{"path", dir + "/model"}}},
      {"data",
       {{"train", examples + "/train.jsonl"},
        {"validation", dir + "/validation.jsonl"},
        {"format", "messages"},
        {"maxLength", 96}}},
      {"method", {{"type", "full"}}},
      {"training",
       {{"maxSteps", kMaxSteps},
        {"microBatchSize", 8},
        {"learningRate", 3e-3},
        {"lrScheduler", "cosine"},
        {"warmupSteps", 10},
        {"logEverySteps", 20},
        {"evalEverySteps", kEvalEvery}}},
      {"output", {{"dir", dir + "/output"}}},
      {"checkpoint", {{"everySteps", kCheckpointEvery}, {"keepLast", kKeepCheckpoints}}},
      {"metrics",
       {{"port", metrics_port}, {"jobName", "ptest"}, {"lingerSeconds", kLingerSeconds}}},
  };
}

struct History {
  std::vector<double> losses;  // per step
  double tokens = 0;           // sum of global_tokens over steps
};

History read_history(const std::string& path) {
  History h;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("global_tokens")) continue;  // evaluation lines
    h.losses.push_back(j.at("loss").get<double>());
    h.tokens += j.at("global_tokens").get<double>();
  }
  return h;
}

std::string url_encode(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// Values of one series over [now - seconds, now] at 1 s resolution, oldest first.
std::vector<double> range_values(const PrometheusServer& prometheus, const std::string& promql,
                                 int seconds) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string url = prometheus.url() + "/api/v1/query_range?query=" + url_encode(promql) +
                          "&start=" + std::to_string(now - seconds) +
                          "&end=" + std::to_string(now) + "&step=1";
  const auto body = nlohmann::json::parse(metrics::http_get(url, 5000));
  const auto& result = body.at("data").at("result");
  if (result.size() != 1)
    throw std::runtime_error(promql + ": expected one series, got " + result.dump());
  std::vector<double> values;
  for (const auto& point : result[0].at("values"))
    values.push_back(std::stod(point[1].get<std::string>()));
  return values;
}

// After the run the targets are down and instant queries at "now" find stale series, so every
// instant query looks at the last sample of the run.
std::string last(const std::string& selector) { return "last_over_time(" + selector + "[10m])"; }

std::string describe(const std::vector<PromSample>& samples) {
  std::string out;
  for (const auto& s : samples) {
    out += "{";
    for (const auto& [k, v] : s.labels) out += k + "=\"" + v + "\",";
    out += "} " + std::to_string(s.value) + "\n";
  }
  return out.empty() ? "(no samples)\n" : out;
}

// What a series of `spec` must look like on `rank`: exactly the spec's labels (the scrape adds
// only `instance`; honor_labels keeps our `job`).
void expect_series_on_both_ranks(const PrometheusServer& prometheus,
                                 const metrics::SeriesSpec& spec) {
  const std::string name =
      std::string(spec.name) + (spec.type == metrics::MetricType::kHistogram ? "_count" : "");
  const auto samples = prometheus.query(last(name + "{job=\"ptest\"}"));
  const auto wanted = metrics::label_names(spec);
  std::set<std::string> expected_names(wanted.begin(), wanted.end());
  expected_names.insert("instance");
  std::map<std::string, int> per_rank;
  for (const auto& s : samples) {
    std::set<std::string> names;
    for (const auto& [k, v] : s.labels) {
      if (k != "__name__") names.insert(k);  // kept by last_over_time() in some versions
    }
    EXPECT_EQ(names, expected_names) << name;
    const std::string rank = s.labels.count("rank") ? s.labels.at("rank") : "?";
    EXPECT_EQ(s.labels.count("local_rank") ? s.labels.at("local_rank") : "?", rank)
        << name << ": one node, so local rank == rank";
    per_rank[rank] += 1;
  }
  const int per_rank_series = spec.name == ts::kStepPhaseSecondsTotal ? 4 : 1;
  EXPECT_EQ(per_rank["0"], per_rank_series) << name << " on rank 0:\n" << describe(samples);
  EXPECT_EQ(per_rank["1"], per_rank_series) << name << " on rank 1:\n" << describe(samples);
}

double value_on_rank(const PrometheusServer& prometheus, const std::string& name, int rank) {
  const auto samples =
      prometheus.query(last(name + "{job=\"ptest\",rank=\"" + std::to_string(rank) + "\"}"));
  if (samples.size() != 1)
    throw std::runtime_error(name + " on rank " + std::to_string(rank) + ":\n" + describe(samples));
  return samples[0].value;
}

// Waits until rank 0 has finished a step (its page then has every gauge), lints its page with
// promtool and returns promtool's verdict.
void check_page_with_promtool(const std::string& dir, int port, const Deadline& deadline,
                              ChildProcess& trainer) {
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  std::string page;
  while (deadline.left() > milliseconds(0) && !trainer.poll()) {
    page = metrics::http_get(url, 5000);
    if (page.find(std::string(ts::kStep) + "{") != std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_NE(page.find(std::string(ts::kTrainLoss) + "{"), std::string::npos)
      << "rank 0 exported no step before the run ended:\n"
      << page;
  const std::string page_file = dir + "/rank0-metrics.txt";
  write_file(page_file, page);
  const std::string log = dir + "/promtool.log";
  const int rc = run_command(
      {"/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", g_paths.promtool, page_file}, log,
      deadline.at_most(milliseconds(15000)));
  EXPECT_EQ(rc, 0) << "promtool check metrics:\n" << file_tail(log) << "\npage:\n" << page;
}

TEST(TrainerPrometheus, TwoCpuRanksScrapedByARealPrometheus) {
  const Deadline deadline(kBudget);
  TempDir tmp;
  const std::string dir = tmp.path();
  const std::string log = dir + "/trainer.log";

  // 1. A tiny model and the run's config.
  const int init_rc =
      run_command({g_paths.trainer, "init-model", "--config",
                   g_paths.repo + "/examples/default/model_config.json", "--tokenizer",
                   g_paths.repo + "/examples/default/tokenizer", "--out", dir + "/model"},
                  log, deadline.at_most(milliseconds(30000)));
  ASSERT_EQ(init_rc, 0) << file_tail(log);
  write_validation_subset(g_paths.repo + "/examples/default/validation.jsonl",
                          dir + "/validation.jsonl", 32);
  const int metrics_port = pick_port_pair();
  const int master_port = metrics::pick_free_port("127.0.0.1");
  write_file(dir + "/config.json", training_config(dir, metrics_port).dump(2));

  // 2. Prometheus first, so that it scrapes from the first step on.
  PrometheusOptions options;
  options.binary = g_paths.prometheus;
  options.targets = {"127.0.0.1:" + std::to_string(metrics_port),
                     "127.0.0.1:" + std::to_string(metrics_port + 1)};
  options.scrape_interval_s = 1;
  options.honor_labels = true;
  PrometheusServer prometheus(options);

  ChildProcess trainer(
      {g_paths.trainer, "launch", "--nproc-per-node", "2", "--master-port",
       std::to_string(master_port), "--", "train", "--config", dir + "/config.json"},
      log);

  // 3. Mid-run: both ranks get scraped, and rank 0's page passes promtool's lint.
  bool scraped = false;
  while (!scraped && deadline.left() > milliseconds(0)) {
    if (auto rc = trainer.poll())
      FAIL() << "trainer exited with " << *rc << ":\n" << file_tail(log);
    try {
      prometheus.wait_until_scraped(deadline.at_most(milliseconds(2000)));
      scraped = true;
    } catch (const std::runtime_error&) {  // not yet: check that the trainer still runs
    }
  }
  ASSERT_TRUE(scraped) << "Prometheus never scraped both ranks\n"
                       << prometheus.log_tail() << "\ntrainer:\n"
                       << file_tail(log);
  if (g_paths.promtool.empty()) {
    std::cout << "promtool not installed: page lint skipped" << std::endl;
  } else {
    check_page_with_promtool(dir, metrics_port, deadline, trainer);
  }

  // 4. The run ends; the linger lets Prometheus take the final values.
  const auto rc = trainer.wait(deadline.at_most(milliseconds(85000)));
  ASSERT_TRUE(rc) << "the training run did not finish within the test's 90 s:\n" << file_tail(log);
  ASSERT_EQ(*rc, 0) << file_tail(log);
  const History history = read_history(dir + "/output/metrics_history.jsonl");
  ASSERT_EQ(history.losses.size(), static_cast<size_t>(kMaxSteps)) << file_tail(log);

  // 5. What Prometheus stored.
  for (const metrics::SeriesSpec& spec : ts::kAll) {
    // The demo model is dense: no tokens are routed to experts. It trains with SFT: no pairs.
    const bool preference = std::string_view(spec.name).rfind("kubetune_preference_", 0) == 0;
    if (!is_gpu_series(spec.name) && spec.name != ts::kExpertTokensTotal && !preference)
      expect_series_on_both_ranks(prometheus, spec);
  }
  EXPECT_TRUE(
      prometheus.query(last("{__name__=~\"kubetune_preference_.+\",job=\"ptest\"}")).empty())
      << "preference series on an SFT run";
  const auto gpu =
      prometheus.query(last("{__name__=~\"kubetune_gpu_.+|kubetune_mfu_ratio\",job=\"ptest\"}"));
  EXPECT_TRUE(gpu.empty()) << "GPU series on a CPU run:\n" << describe(gpu);
  // The same kind of selector does find the CPU series, so the empty answer above means something.
  EXPECT_FALSE(prometheus.query(last("{__name__=~\"kubetune_.+\",job=\"ptest\"}")).empty());

  for (int rank : {0, 1}) {
    EXPECT_EQ(value_on_rank(prometheus, std::string(ts::kStep), rank), double{kMaxSteps});
    EXPECT_EQ(value_on_rank(prometheus, std::string(ts::kTotalSteps), rank), double{kMaxSteps});
    // The loss is global (all ranks), so both ranks end on the history's last value (to the 16
    // significant digits of prometheus-cpp's text format).
    EXPECT_NEAR(value_on_rank(prometheus, std::string(ts::kTrainLoss), rank), history.losses.back(),
                1e-15 * std::fabs(history.losses.back()));
  }
  // Every checkpoint is written by rank 0: the periodic ones and the final one.
  EXPECT_EQ(value_on_rank(prometheus, std::string(ts::kCheckpointsTotal), 0),
            double{(kMaxSteps - 1) / kCheckpointEvery + 1});
  EXPECT_EQ(value_on_rank(prometheus, std::string(ts::kCheckpointsTotal), 1), 0.0);

  // Each rank counts its own tokens; together they are every token trained.
  const auto tokens = prometheus.query("sum(" + last("kubetune_tokens_total{job=\"ptest\"}") + ")");
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].value, history.tokens);

  // Every loss Prometheus stored is one the run logged for some step. (Which steps it saw depends
  // on when its scrapes fell: on a busy machine the first one can come after the loss has levelled
  // off, so "the first scraped loss is above the last" is no property of the exporter.)
  const auto loss = range_values(prometheus, "kubetune_train_loss{job=\"ptest\",rank=\"0\"}", 120);
  ASSERT_GE(loss.size(), 5u) << "too few scrapes of the loss";
  auto logged = [&](double v) {
    return std::any_of(history.losses.begin(), history.losses.end(),
                       [&](double h) { return std::fabs(h - v) <= 1e-15 * std::fabs(h); });
  };
  for (double v : loss) EXPECT_TRUE(logged(v)) << v << " is no step's loss in the history";
  const auto max_loss =
      prometheus.query("max_over_time(kubetune_train_loss{job=\"ptest\",rank=\"0\"}[10m])");
  ASSERT_EQ(max_loss.size(), 1u);
  EXPECT_EQ(max_loss[0].value, *std::max_element(loss.begin(), loss.end()));
  // And the run learned: its last steps' loss is below its first's.
  EXPECT_LT(history.losses.back(), history.losses.front());
  std::cout << "scraped " << loss.size() << " loss samples: " << loss.front() << " -> "
            << loss.back() << "; " << history.tokens << " tokens; "
            << std::chrono::duration<double>(kBudget - deadline.left()).count() << " s"
            << std::endl;
}

}  // namespace
}  // namespace kubetune::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using kubetune::testing::g_paths;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--trainer")
      g_paths.trainer = value;
    else if (flag == "--repo")
      g_paths.repo = value;
    else if (flag == "--prometheus")
      g_paths.prometheus = value;
    else if (flag == "--promtool")
      g_paths.promtool = value;
    else {
      std::cerr << "unknown argument " << flag << std::endl;
      return 2;
    }
  }
  if (g_paths.trainer.empty() || g_paths.repo.empty()) {
    std::cerr << "usage: " << argv[0]
              << " --trainer BIN --repo DIR --prometheus BIN [--promtool BIN]" << std::endl;
    return 2;
  }
  if (!kubetune::metrics::testing::PrometheusServer::available(g_paths.prometheus)) {
    std::cout << g_paths.prometheus << " is not installed: SKIPPED" << std::endl;
    return 77;
  }
  return RUN_ALL_TESTS();
}
