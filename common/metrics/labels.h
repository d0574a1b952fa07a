#pragma once

#include <map>
#include <string>

namespace kubetune::metrics {

// Label name -> value. A std::map keeps labels sorted by name, which gives the serializer a stable,
// reproducible order for free.
using Labels = std::map<std::string, std::string>;

}  // namespace kubetune::metrics
