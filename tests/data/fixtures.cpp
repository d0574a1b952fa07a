#include "fixtures.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace kubetune::data::testing {

std::string fixture_dir() {
  const char* dir = std::getenv("KUBETUNE_DATA_FIXTURES");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "KUBETUNE_DATA_FIXTURES is not set; run through ctest (fixture \"data\")";
    return "";
  }
  return dir;
}

nlohmann::json read_fixture_json(const std::string& name) {
  const std::string path = fixture_dir() + "/" + name;
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open fixture " << path;
    return nlohmann::json::array();
  }
  return nlohmann::json::parse(in);
}

}  // namespace kubetune::data::testing
