#pragma once
// Access to the files make_fixtures.py writes (directory in $KUBETUNE_DATA_FIXTURES).

#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::data::testing {

// The fixture directory; fails the current test (and returns "") when the variable is unset.
std::string fixture_dir();
// Parses fixture_dir()/name.
nlohmann::json read_fixture_json(const std::string& name);

}  // namespace kubetune::data::testing
