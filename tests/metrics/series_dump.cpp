// Helper for the promtool test: serves every trainer and operator series from a real HttpEndpoint,
// fetches its own /metrics over HTTP and prints the page on stdout. Exits 1 if a series from the
// tables is missing from the page, so an empty page cannot pass `promtool check metrics`.
#include <prometheus/registry.h>

#include <iostream>
#include <memory>

#include "common/metrics/http_endpoint.h"
#include "common/metrics/operator_series.h"
#include "common/metrics/scrape.h"
#include "common/metrics/trainer_series.h"
#include "example_series.h"

using namespace kubetune::metrics;

namespace {

// Histograms only show up as name_bucket/_sum/_count samples.
bool present(const ParsedMetrics& page, const SeriesSpec& spec) {
  const std::string name(spec.name);
  return spec.type == MetricType::kHistogram ? first_value(page, name + "_count").has_value()
                                             : first_value(page, name).has_value();
}

}  // namespace

int main() {
  try {
    auto registry = std::make_shared<prometheus::Registry>();
    testing::populate_all_series(*registry, "ft-demo");
    HttpEndpoint exposer("127.0.0.1", 0);
    exposer.add_registry(registry);
    const std::string page =
        http_get("http://127.0.0.1:" + std::to_string(exposer.port()) + "/metrics", 5000);
    const ParsedMetrics parsed = parse_text_format(page);
    int missing = 0;
    auto check = [&](const SeriesSpec& spec) {
      if (!present(parsed, spec)) {
        std::cerr << "series_dump: " << spec.name << " missing from /metrics\n";
        ++missing;
      }
    };
    for (const auto& spec : trainer_series::kAll) check(spec);
    for (const auto& spec : operator_series::kAll) check(spec);
    std::cout << page;
    return missing == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "series_dump: " << e.what() << "\n";
    return 1;
  }
}
