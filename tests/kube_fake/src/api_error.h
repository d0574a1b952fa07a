#pragma once
// Errors of the fake API server. Every failure leaves the server as a Kubernetes `Status` object
// (kind Status, apiVersion v1, status Failure, message, reason, code), exactly as clients parse it.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "kubetune/kubefake/resource_info.h"

namespace kubetune::kubefake {

class ApiError : public std::runtime_error {
 public:
  ApiError(int code, std::string reason, const std::string& message,
           nlohmann::json details = nullptr);
  int code() const { return code_; }
  const std::string& reason() const { return reason_; }
  nlohmann::json status() const;  // the Status object to send

 private:
  int code_;
  std::string reason_;
  nlohmann::json details_;
};

nlohmann::json make_status(int code, const std::string& reason, const std::string& message,
                           const nlohmann::json& details = nullptr);

// "pods" for the core group, "finetunejobs.kubetune.io" otherwise: how messages name a resource.
std::string qualified_resource(const ResourceInfo& info);

// The errors a real apiserver answers, with its reasons and message wording.
ApiError not_found(const ResourceInfo& info, const std::string& name);
ApiError already_exists(const ResourceInfo& info, const std::string& name);
ApiError conflict(const ResourceInfo& info, const std::string& name);
ApiError invalid(const ResourceInfo& info, const std::string& name, const std::string& field,
                 const std::string& why);
ApiError bad_request(const std::string& message);
ApiError expired(const std::string& message);  // 410, reason Expired
ApiError page_not_found();                     // unknown path: 404 NotFound

}  // namespace kubetune::kubefake
