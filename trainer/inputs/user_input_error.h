// A problem in what the user gave us (model folder, data, config): retrying cannot fix it, so the
// trainer exits with kExitUserError (common/contracts.h) rather than kExitRetryable.
#pragma once

#include <stdexcept>

namespace kubetune::train {

class UserInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kubetune::train
