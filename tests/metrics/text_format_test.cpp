// The canonical series spelling the scrape parser keys by. Writing the format is prometheus-cpp's;
// its output is checked by `promtool check metrics` and scraped by a real Prometheus in
// prometheus_scrape_test.cpp, the reference implementations.
#include "common/metrics/text_format.h"

#include <gtest/gtest.h>

namespace kubetune::metrics {
namespace {

TEST(Escaping, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(escape_label_value(R"(C:\dir "x")"
                               "\nend"),
            R"(C:\\dir \"x\"\nend)");
}

TEST(SeriesKey, MatchesSampleSpelling) {
  EXPECT_EQ(series_key("m", {}), "m");
  EXPECT_EQ(series_key("m", {{"b", "2"}, {"a", "x\"y"}}), "m{a=\"x\\\"y\",b=\"2\"}");
}

}  // namespace
}  // namespace kubetune::metrics
