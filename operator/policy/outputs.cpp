#include "operator/policy/outputs.h"

#include <nlohmann/json.hpp>

#include "operator/policy/fetch_end.h"

namespace kubetune::op {
namespace {

api::JobOutput output(const std::string& name, const std::string& uri) {
  api::JobOutput o;
  o.name = name;
  o.uri = uri;
  return o;
}

// The publish container's report, when it ended well.
std::vector<api::JobOutput> published(const k8s::Pod& pod) {
  const FetchEnd end = read_publish_end(pod);
  return end.exit_code == 0 ? parse_job_outputs(end.results) : std::vector<api::JobOutput>{};
}

}  // namespace

std::vector<api::JobOutput> parse_job_outputs(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return {};
  try {
    return j.get<std::vector<api::JobOutput>>();
  } catch (const nlohmann::json::exception&) {
    return {};
  }
}

std::vector<api::JobOutput> job_outputs(const api::TrainConfig& config,
                                        const std::optional<k8s::Pod>& rank0) {
  if (rank0) {
    if (auto reported = published(*rank0); !reported.empty()) return reported;
  }
  const bool full = config.method.type == api::MethodType::kFull;
  std::vector<api::JobOutput> out = {output(full ? "model" : "adapter", config.output.dir)};
  if (!full && config.output.save_merged)
    out.push_back(output("merged", config.output.dir + "/merged"));
  return out;
}

}  // namespace kubetune::op
