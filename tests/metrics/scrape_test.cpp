// parse_text_format() and first_value(): reading a /metrics page back into series.
#include "common/metrics/scrape.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <stdexcept>

#include "common/metrics/text_format.h"

namespace kubetune::metrics {
namespace {

// What prometheus-cpp writes, the parser reads back: label escaping, large counters, histograms.
TEST(Parse, RoundTripsPrometheusCppOutput) {
  prometheus::Registry registry;
  prometheus::BuildGauge()
      .Name("kubetune_train_loss")
      .Help("Loss.")
      .Register(registry)
      .Add({{"job", "ft \"1\"\\x\ny"}, {"rank", "0"}})
      .Set(1.25);
  prometheus::BuildCounter()
      .Name("kubetune_tokens_total")
      .Help("T.")
      .Register(registry)
      .Add({{"rank", "3"}})
      .Increment(1e12);
  prometheus::BuildHistogram()
      .Name("h")
      .Help("H.")
      .Register(registry)
      .Add({}, prometheus::Histogram::BucketBoundaries{0.1})
      .Observe(0.05);
  const ParsedMetrics parsed =
      parse_text_format(prometheus::TextSerializer().Serialize(registry.Collect()));
  EXPECT_EQ(parsed.size(), 6u);
  EXPECT_EQ(
      parsed.at(series_key("kubetune_train_loss", {{"job", "ft \"1\"\\x\ny"}, {"rank", "0"}})),
      1.25);
  EXPECT_EQ(parsed.at("kubetune_tokens_total{rank=\"3\"}"), 1e12);
  // Keys sort all labels by name, "le" included.
  EXPECT_EQ(parsed.at("h_bucket{le=\"0.1\"}"), 1);
  EXPECT_EQ(parsed.at("h_bucket{le=\"+Inf\"}"), 1);
  EXPECT_EQ(parsed.at("h_sum"), 0.05);
}

TEST(Parse, AcceptsSpacingTimestampsSpecialValuesAndCrlf) {
  const ParsedMetrics parsed = parse_text_format(
      "# a comment\n\n"
      "a{ x = \"1\" , y=\"2\", } 3 1700000000000\r\n"
      "b +Inf\n"
      "c -Inf\n"
      "d NaN\n"
      "e 1.5e3\n"
      "  # indented comment\n");
  EXPECT_EQ(parsed.at("a{x=\"1\",y=\"2\"}"), 3);
  EXPECT_TRUE(std::isinf(parsed.at("b")) && parsed.at("b") > 0);
  EXPECT_TRUE(std::isinf(parsed.at("c")) && parsed.at("c") < 0);
  EXPECT_TRUE(std::isnan(parsed.at("d")));
  EXPECT_EQ(parsed.at("e"), 1500);
}

// Every malformed line is rejected with its line number.
TEST(Parse, RejectsMalformedLines) {
  for (const char* bad : {"a{x=\"1\" 3", "a{x=1} 3", "a{x=\"1\"} three", "a{x=\"\\t\"} 1", "a",
                          "9a 1", "a{x=\"1\",x=\"2\"} 1", "a 1 2 3", "a{x=\"1\"y=\"2\"} 1"}) {
    try {
      parse_text_format(std::string("ok 1\n") + bad + "\n");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    }
  }
}

TEST(FirstValue, FindsByNameIgnoringLabelsAndLongerNames) {
  const ParsedMetrics parsed = parse_text_format(
      "kubetune_step_phase_seconds_total{phase=\"x\"} 9\n"
      "kubetune_step{job=\"j\",rank=\"0\"} 42\n"
      "kubetune_steps 1\n");
  EXPECT_EQ(first_value(parsed, "kubetune_step"), 42);
  EXPECT_EQ(first_value(parsed, "kubetune_steps"), 1);
  EXPECT_EQ(first_value(parsed, "kubetune_ste"), std::nullopt);
  EXPECT_EQ(first_value(parsed, "kubetune_eta_seconds"), std::nullopt);
}

}  // namespace
}  // namespace kubetune::metrics
