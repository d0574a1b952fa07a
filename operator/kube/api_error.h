// An error answer of the API server (its Status object) or a transport failure (code 0).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace kubetune::op::kube {

class ApiError : public std::runtime_error {
 public:
  ApiError(int code, std::string reason, const std::string& message)
      : std::runtime_error(message), code_(code), reason_(std::move(reason)) {}
  int code() const { return code_; }                     // HTTP status; 0 = no answer
  const std::string& reason() const { return reason_; }  // Status.reason, e.g. "Conflict"

  bool not_found() const { return code_ == 404; }
  bool conflict() const { return code_ == 409 && reason_ != "AlreadyExists"; }
  bool already_exists() const { return code_ == 409 && reason_ == "AlreadyExists"; }
  bool gone() const { return code_ == 410; }

 private:
  int code_;
  std::string reason_;
};

}  // namespace kubetune::op::kube
