// The text exposition format 0.0.4 as the Registry writes it. Expected strings here follow the
// format specification (https://prometheus.io/docs/instrumenting/exposition_formats/); the same
// output is also checked by `promtool check metrics` and scraped by a real Prometheus in
// prometheus_scrape_test.cpp, which are the reference implementations.
#include "common/metrics/text_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/metrics/registry.h"

namespace kubetune::metrics {
namespace {

TEST(FormatValue, IntegersPrintWithoutExponent) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(42), "42");
  EXPECT_EQ(format_value(-3), "-3");
  EXPECT_EQ(format_value(1e6), "1000000");
  EXPECT_EQ(format_value(9007199254740992.0), "9007199254740992");
}

TEST(FormatValue, FractionsRoundTripWithShortestText) {
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(2.5), "2.5");
  EXPECT_EQ(format_value(1e-9), "1e-09");
  const double awkward = 1.0 / 3.0;
  EXPECT_EQ(std::strtod(format_value(awkward).c_str(), nullptr), awkward);
  EXPECT_EQ(format_value(1e300), "1e+300");
}

TEST(FormatValue, SpecialValuesUsePrometheusSpelling) {
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(Escaping, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(escape_label_value(R"(C:\dir "x")"
                               "\nend"),
            R"(C:\\dir \"x\"\nend)");
}

TEST(Escaping, HelpEscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(escape_help("a \"b\" \\ c\nd"), "a \"b\" \\\\ c\\nd");
}

TEST(Serialize, HelpAndTypeOncePerFamilyAndSortedOutput) {
  Registry registry;
  auto& loss = registry.gauge("zz_loss", "Loss.");
  loss.with({{"rank", "1"}}).set(0.5);
  loss.with({{"rank", "0"}}).set(0.25);
  registry.counter("aa_total", "Things.").with({}).inc(3);
  EXPECT_EQ(registry.serialize(),
            "# HELP aa_total Things.\n"
            "# TYPE aa_total counter\n"
            "aa_total 3\n"
            "# HELP zz_loss Loss.\n"
            "# TYPE zz_loss gauge\n"
            "zz_loss{rank=\"0\"} 0.25\n"
            "zz_loss{rank=\"1\"} 0.5\n");
}

TEST(Serialize, LabelsSortedByNameAndConstantLabelsMerged) {
  Registry registry;
  registry.gauge("g", "G.", {{"job", "j"}}).with({{"zone", "z"}, {"a", "1"}}).set(1);
  EXPECT_EQ(registry.serialize(),
            "# HELP g G.\n# TYPE g gauge\ng{a=\"1\",job=\"j\",zone=\"z\"} 1\n");
}

TEST(Serialize, EscapesLabelValuesAndHelp) {
  Registry registry;
  registry.gauge("g", "line1\nline2 \\ \"q\"").with({{"path", "a\"b\\c\nd"}}).set(1);
  EXPECT_EQ(registry.serialize(),
            "# HELP g line1\\nline2 \\\\ \"q\"\n"
            "# TYPE g gauge\n"
            "g{path=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(Serialize, FamiliesWithoutChildrenAreOmitted) {
  Registry registry;
  registry.counter("unused_total", "Never used.");
  EXPECT_EQ(registry.serialize(), "");
}

TEST(Serialize, HistogramHasCumulativeBucketsInfSumAndCount) {
  Registry registry;
  auto& h = registry.histogram("step_seconds", "Step.", {0.5, 1, 2}).with({{"rank", "0"}});
  h.observe(0.5);  // le is inclusive: lands in 0.5
  h.observe(0.7);
  h.observe(1.5);
  h.observe(100);  // only +Inf
  EXPECT_EQ(registry.serialize(),
            "# HELP step_seconds Step.\n"
            "# TYPE step_seconds histogram\n"
            "step_seconds_bucket{rank=\"0\",le=\"0.5\"} 1\n"
            "step_seconds_bucket{rank=\"0\",le=\"1\"} 2\n"
            "step_seconds_bucket{rank=\"0\",le=\"2\"} 3\n"
            "step_seconds_bucket{rank=\"0\",le=\"+Inf\"} 4\n"
            "step_seconds_sum{rank=\"0\"} 102.7\n"
            "step_seconds_count{rank=\"0\"} 4\n");
}

TEST(Serialize, HistogramWithoutLabelsStillHasLe) {
  Registry registry;
  registry.histogram("h", "H.", {1}).with().observe(2);
  EXPECT_EQ(registry.serialize(),
            "# HELP h H.\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 1\nh_sum 2\nh_count 1\n");
}

TEST(Serialize, RemovedChildDisappears) {
  Registry registry;
  auto& family = registry.gauge("g", "G.");
  family.with({{"job", "a"}}).set(1);
  family.with({{"job", "b"}}).set(2);
  family.remove({{"job", "a"}});
  family.remove({{"job", "never-existed"}});  // no-op
  EXPECT_EQ(registry.serialize(), "# HELP g G.\n# TYPE g gauge\ng{job=\"b\"} 2\n");
}

TEST(SeriesKey, MatchesSampleSpelling) {
  EXPECT_EQ(series_key("m", {}), "m");
  EXPECT_EQ(series_key("m", {{"b", "2"}, {"a", "x\"y"}}), "m{a=\"x\\\"y\",b=\"2\"}");
}

}  // namespace
}  // namespace kubetune::metrics
