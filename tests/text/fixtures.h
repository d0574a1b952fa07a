// Helpers for reading the reference fixtures written by make_fixtures.py.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::text::testing {

// Directory given by the KUBETUNE_TEXT_FIXTURES environment variable (set by ctest).
inline std::string fixtures_dir() {
  const char* dir = std::getenv("KUBETUNE_TEXT_FIXTURES");
  return dir ? dir : "";
}

inline nlohmann::json read_fixture_json(const std::string& relative) {
  const std::string path = fixtures_dir() + "/" + relative;
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("missing fixture " + path +
                             " (run ctest, which runs text_fixtures first)");
  return nlohmann::json::parse(in);
}

// Fails the test early with a clear message when the fixtures were not generated.
#define KT_REQUIRE_FIXTURES()                                                            \
  do {                                                                                   \
    if (::kubetune::text::testing::fixtures_dir().empty()) {                             \
      FAIL() << "KUBETUNE_TEXT_FIXTURES is not set; run through ctest (fixture 'text')"; \
    }                                                                                    \
  } while (0)

}  // namespace kubetune::text::testing
