// Metric kinds, registration rules, name validation and concurrent use of the Registry.
#include "common/metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/metrics/names.h"
#include "common/metrics/scrape.h"

namespace kubetune::metrics {
namespace {

// Asserts that `f` throws std::invalid_argument whose message mentions `needle`.
template <class F>
void expect_invalid(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected std::invalid_argument mentioning " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Names, MetricNames) {
  for (const char* ok : {"a", "_a", ":a", "kubetune_step", "a:b_c9", "A"}) {
    EXPECT_TRUE(is_valid_metric_name(ok)) << ok;
  }
  for (const char* bad : {"", "9a", "a-b", "a b", "a.b", "ä", "a{"}) {
    EXPECT_FALSE(is_valid_metric_name(bad)) << bad;
  }
}

TEST(Names, LabelNames) {
  for (const char* ok : {"a", "_a", "local_rank", "a9", "_"}) {
    EXPECT_TRUE(is_valid_label_name(ok)) << ok;
  }
  for (const char* bad : {"", "9a", "a:b", "a-b", "__name__", "__x"}) {
    EXPECT_FALSE(is_valid_label_name(bad)) << bad;
  }
}

TEST(Names, Utf8Validation) {
  EXPECT_NO_THROW(check_utf8("plain", "x"));
  EXPECT_NO_THROW(check_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80", "x"));
  expect_invalid([] { check_utf8("bad \xFF", "field f"); }, "field f");
  expect_invalid([] { check_utf8("cut \xE2\x82", "x"); }, "invalid UTF-8");
  expect_invalid([] { check_utf8("overlong \xC0\xAF", "x"); }, "invalid UTF-8");
  expect_invalid([] { check_utf8("surrogate \xED\xA0\x80", "x"); }, "invalid UTF-8");
}

TEST(Registry, RejectsBadNamesNamingThem) {
  Registry registry;
  expect_invalid([&] { registry.counter("bad-name_total", "x"); }, "bad-name_total");
  expect_invalid([&] { registry.gauge("g", "x", {{"__reserved", "v"}}); }, "__reserved");
  auto& family = registry.gauge("g", "x");
  expect_invalid([&] { family.with({{"local-rank", "0"}}); }, "local-rank");
  expect_invalid([&] { family.with({{"rank", "\xFF"}}); }, "rank");
}

TEST(Registry, SameDefinitionReturnsSameFamily) {
  Registry registry;
  auto& a = registry.counter("c_total", "help", {{"job", "j"}});
  auto& b = registry.counter("c_total", "help", {{"job", "j"}});
  EXPECT_EQ(&a, &b);
  auto& h1 = registry.histogram("h", "help", {1, 2});
  auto& h2 = registry.histogram("h", "help", {1, 2, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(&h1, &h2);
}

TEST(Registry, ConflictingDefinitionsThrow) {
  Registry registry;
  registry.counter("c_total", "help");
  expect_invalid([&] { registry.gauge("c_total", "help"); }, "c_total");
  expect_invalid([&] { registry.counter("c_total", "other help"); }, "help");
  expect_invalid([&] { registry.counter("c_total", "help", {{"a", "b"}}); }, "constant labels");
  registry.histogram("h", "help", {1});
  expect_invalid([&] { registry.histogram("h", "help", {2}); }, "bucket");
  // A histogram "h" produces h_count: a gauge with that name would break the exposition.
  expect_invalid([&] { registry.gauge("h_count", "help"); }, "h_count");
  registry.gauge("x_sum", "help");
  expect_invalid([&] { registry.histogram("x", "help", {1}); }, "x_sum");
}

TEST(Registry, HistogramRulesAreEnforced) {
  Registry registry;
  expect_invalid([&] { registry.histogram("h1", "x", {2, 1}); }, "strictly increasing");
  expect_invalid([&] { registry.histogram("h2", "x", {1, 1}); }, "strictly increasing");
  expect_invalid([&] { registry.histogram("h3", "x", {std::nan("")}); }, "NaN");
  expect_invalid([&] { registry.histogram("h4", "x", {1}, {{"le", "1"}}); }, "le");
  auto& family = registry.histogram("h5", "x", {1});
  expect_invalid([&] { family.with({{"le", "1"}}); }, "reserved");
}

TEST(Registry, LabelCannotRepeatConstantLabel) {
  Registry registry;
  auto& family = registry.gauge("g", "x", {{"job", "a"}});
  expect_invalid([&] { family.with({{"job", "b"}}); }, "constant label");
}

TEST(Counter, IsMonotonic) {
  Counter counter;
  counter.inc();
  counter.inc(2.5);
  counter.inc(0);
  EXPECT_EQ(counter.value(), 3.5);
  expect_invalid([&] { counter.inc(-1); }, "-1");
  EXPECT_THROW(counter.inc(std::nan("")), std::invalid_argument);
  EXPECT_EQ(counter.value(), 3.5);
}

TEST(Gauge, SetIncDec) {
  Gauge gauge;
  gauge.set(10);
  gauge.inc();
  gauge.dec(4);
  gauge.inc(-0.5);
  EXPECT_EQ(gauge.value(), 6.5);
}

TEST(Family, ReferencesStayValidWhileOthersAreAdded) {
  Registry registry;
  auto& family = registry.counter("c_total", "x");
  Counter& first = family.with({{"rank", "0"}});
  for (int i = 1; i < 1000; ++i) family.with({{"rank", std::to_string(i)}}).inc();
  first.inc(7);
  EXPECT_EQ(&first, &family.with({{"rank", "0"}}));
  EXPECT_EQ(family.with({{"rank", "0"}}).value(), 7);
}

// Writers on several threads (counters, gauges, histograms, new children, new families) while
// another thread serializes and parses: no lost increments and every page parses.
TEST(Registry, ConcurrentUpdatesAndSerialization) {
  Registry registry;
  constexpr int kThreads = 4;
  constexpr int kIncrements = 20000;
  auto& counter = registry.counter("hits_total", "x").with({{"rank", "0"}});
  auto& histogram = registry.histogram("lat_seconds", "x", {0.5}).with();
  std::atomic<bool> done{false};
  std::atomic<int> pages{0};
  std::thread reader([&] {
    while (!done) {
      const ParsedMetrics parsed = parse_text_format(registry.serialize());
      // Snapshots of a histogram are self-consistent: +Inf bucket == count.
      auto inf = parsed.find("lat_seconds_bucket{le=\"+Inf\"}");
      if (inf != parsed.end()) {
        EXPECT_EQ(inf->second, parsed.at("lat_seconds_count"));
      }
      ++pages;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      auto& own = registry.gauge("g_" + std::to_string(t), "x");
      for (int i = 0; i < kIncrements; ++i) {
        counter.inc();
        histogram.observe(i % 2 == 0 ? 0.1 : 1.0);
        own.with({{"i", std::to_string(i % 50)}}).inc();
      }
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_GT(pages.load(), 0);
  EXPECT_EQ(counter.value(), kThreads * kIncrements);
  const ParsedMetrics final_page = parse_text_format(registry.serialize());
  EXPECT_EQ(final_page.at("hits_total{rank=\"0\"}"), kThreads * kIncrements);
  EXPECT_EQ(final_page.at("lat_seconds_count"), kThreads * kIncrements);
  EXPECT_EQ(final_page.at("lat_seconds_bucket{le=\"0.5\"}"), kThreads * kIncrements / 2);
  EXPECT_EQ(final_page.at("g_0{i=\"7\"}"), kIncrements / 50);
}

}  // namespace
}  // namespace kubetune::metrics
