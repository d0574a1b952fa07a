#include "trainer/data/example.h"

namespace kubetune::data {

int64_t count_targets(const Example& example) {
  int64_t n = 0;
  for (size_t t = 1; t < example.labels.size(); ++t) {
    if (example.labels[t] != kIgnoreIndex) ++n;
  }
  return n;
}

}  // namespace kubetune::data
