// The HTTP side: HttpEndpoint serving prometheus-cpp registries on /metrics and extra handlers,
// http_get() reading them.

// cpprestsdk's U() macro breaks GoogleTest's headers; we do not need it.
#define _TURN_OFF_PLATFORM_STRING
#include "common/metrics/http_endpoint.h"

#include <cpprest/http_client.h>
#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <stdexcept>

#include "common/metrics/free_port.h"
#include "common/metrics/scrape.h"

namespace kubetune::metrics {
namespace {

using prometheus::Registry;

std::string base_url(const HttpEndpoint& exposer) {
  return "http://127.0.0.1:" + std::to_string(exposer.port());
}

// Status and content type need the raw response, which http_get() hides.
web::http::http_response raw_request(const std::string& url, const web::http::method& method) {
  web::http::client::http_client client(url);
  return client.request(method).get();
}

TEST(HttpEndpoint, ServesRegistriesOnMetricsWithPrometheusContentType) {
  auto first = std::make_shared<Registry>();
  auto second = std::make_shared<Registry>();
  HttpEndpoint exposer("127.0.0.1", 0);
  ASSERT_GT(exposer.port(), 0);
  exposer.add_registry(first);
  exposer.add_registry(second);
  prometheus::BuildCounter()
      .Name("a_total")
      .Help("A.")
      .Register(*first)
      .Add({{"rank", "0"}})
      .Increment(5);
  prometheus::BuildGauge().Name("b").Help("B.").Register(*second).Add({}).Set(-1.5);

  const std::string body = http_get(base_url(exposer) + "/metrics", 2000);
  auto families = first->Collect();
  for (auto& f : second->Collect()) families.push_back(f);
  EXPECT_EQ(body, prometheus::TextSerializer().Serialize(families));
  const ParsedMetrics parsed = parse_text_format(body);
  EXPECT_EQ(parsed.at("a_total{rank=\"0\"}"), 5);
  EXPECT_EQ(parsed.at("b"), -1.5);

  auto response = raw_request(base_url(exposer) + "/metrics", web::http::methods::GET);
  EXPECT_EQ(response.status_code(), 200);
  EXPECT_EQ(response.headers().content_type(), "text/plain; version=0.0.4; charset=utf-8");
}

TEST(HttpEndpoint, ValuesAreLiveBetweenScrapes) {
  auto registry = std::make_shared<Registry>();
  HttpEndpoint exposer("127.0.0.1", 0);
  exposer.add_registry(registry);
  auto& step = prometheus::BuildGauge()
                   .Name("kubetune_step")
                   .Help("Step.")
                   .Register(*registry)
                   .Add({{"rank", "0"}});
  step.Set(1);
  EXPECT_EQ(first_value(parse_text_format(http_get(base_url(exposer) + "/metrics", 2000)),
                        "kubetune_step"),
            1);
  step.Set(2);
  EXPECT_EQ(first_value(parse_text_format(http_get(base_url(exposer) + "/metrics", 2000)),
                        "kubetune_step"),
            2);
}

TEST(HttpEndpoint, ExtraHandlersUnknownPathsAndMethods) {
  HttpEndpoint exposer("127.0.0.1", 0);
  bool ready = false;
  exposer.add_handler("/healthz", [] { return std::make_pair(200, std::string("ok\n")); });
  exposer.add_handler("/readyz", [&] {
    return ready ? std::make_pair(200, std::string("ready\n"))
                 : std::make_pair(503, std::string("loading\n"));
  });
  exposer.add_handler("/boom",
                      []() -> std::pair<int, std::string> { throw std::runtime_error("kaput"); });
  EXPECT_EQ(http_get(base_url(exposer) + "/healthz", 2000), "ok\n");
  EXPECT_EQ(raw_request(base_url(exposer) + "/readyz", web::http::methods::GET).status_code(), 503);
  ready = true;
  EXPECT_EQ(http_get(base_url(exposer) + "/readyz", 2000), "ready\n");
  auto boom = raw_request(base_url(exposer) + "/boom", web::http::methods::GET);
  EXPECT_EQ(boom.status_code(), 500);
  EXPECT_NE(boom.extract_utf8string(true).get().find("kaput"), std::string::npos);
  EXPECT_EQ(raw_request(base_url(exposer) + "/nope", web::http::methods::GET).status_code(), 404);
  EXPECT_EQ(raw_request(base_url(exposer) + "/metrics", web::http::methods::POST).status_code(),
            405);
  // Empty registry list: an empty, valid page.
  EXPECT_EQ(http_get(base_url(exposer) + "/metrics", 2000), "");
}

TEST(HttpEndpoint, RejectsBadHandlerPathsAndPorts) {
  HttpEndpoint exposer("127.0.0.1", 0);
  auto ok = [] { return std::make_pair(200, std::string()); };
  EXPECT_THROW(exposer.add_handler("/metrics", ok), std::invalid_argument);
  EXPECT_THROW(exposer.add_handler("healthz", ok), std::invalid_argument);
  EXPECT_THROW(exposer.add_registry(nullptr), std::invalid_argument);
  EXPECT_THROW(HttpEndpoint("127.0.0.1", 70000), std::invalid_argument);
  // The port is taken by the first exposer.
  try {
    HttpEndpoint clash("127.0.0.1", exposer.port());
    ADD_FAILURE() << "second exposer on the same port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(exposer.port())), std::string::npos);
  }
}

TEST(HttpEndpoint, ListensOnAllInterfacesWithExplicitPort) {
  const int port = pick_free_port("0.0.0.0");
  HttpEndpoint exposer("0.0.0.0", port);
  EXPECT_EQ(exposer.port(), port);
  EXPECT_EQ(http_get("http://127.0.0.1:" + std::to_string(port) + "/metrics", 2000), "");
}

TEST(HttpEndpoint, StopsOnDestruction) {
  int port = 0;
  {
    HttpEndpoint exposer("127.0.0.1", 0);
    port = exposer.port();
    EXPECT_NO_THROW(http_get("http://127.0.0.1:" + std::to_string(port) + "/metrics", 2000));
  }
  EXPECT_THROW(http_get("http://127.0.0.1:" + std::to_string(port) + "/metrics", 2000),
               std::runtime_error);
}

TEST(HttpGet, ErrorsNameTheUrl) {
  const int closed_port = pick_free_port("127.0.0.1");  // nobody listens there
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port) + "/metrics";
  try {
    http_get(url, 1000);
    ADD_FAILURE() << "no error for a closed port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
  HttpEndpoint exposer("127.0.0.1", 0);
  try {
    http_get(base_url(exposer) + "/missing", 1000);
    ADD_FAILURE() << "no error for a 404";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("404"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kubetune::metrics
