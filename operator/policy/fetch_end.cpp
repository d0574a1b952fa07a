#include "operator/policy/fetch_end.h"

#include <nlohmann/json.hpp>

#include "common/contracts.h"
#include "operator/render/publish.h"
#include "operator/render/sources.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

// The last line that is not empty, cut to kFetchErrorChars.
std::string last_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t newline = text.rfind('\n');
  if (newline != std::string::npos) text.erase(0, newline + 1);
  if (text.size() > kFetchErrorChars) text = text.substr(0, kFetchErrorChars - 3) + "...";
  return text;
}

// kubetune-fetch's container `name` among `statuses`, as the kubelet reports it.
FetchEnd read_tool_end(const std::vector<k8s::ContainerStatus>& statuses, const char* name) {
  FetchEnd end;
  end.container = name;
  for (const auto& c : statuses) {
    if (c.name != name) continue;
    end.running = c.state.running.has_value();
    // The operator reads no Secret (its RBAC grants none): the kubelet's report is how a missing
    // one is known, a few seconds after the pod is placed.
    if (c.state.waiting && c.state.waiting->reason.value_or("") == "CreateContainerConfigError")
      end.cannot_start = last_line(c.state.waiting->message.value_or("CreateContainerConfigError"));
    if (!c.state.terminated) break;
    const k8s::ContainerStateTerminated& t = *c.state.terminated;
    end.exit_code = t.exit_code;
    end.reason = t.reason.value_or("");
    if (t.exit_code == 0) {
      end.results = t.message.value_or("");
    } else {
      end.error = last_line(t.message.value_or(""));
    }
    break;
  }
  return end;
}

}  // namespace

FetchEnd read_fetch_end(const k8s::Pod& pod) {
  return read_tool_end(pod.status.init_container_statuses, kFetchContainer);
}

FetchEnd read_publish_end(const k8s::Pod& pod) {
  return read_tool_end(pod.status.container_statuses, kPublishContainer);
}

std::string fetch_cannot_start_message(const std::string& who, const FetchEnd& fetch) {
  return who + ": its " + fetch.container + " container cannot start: " + fetch.cannot_start +
         " (spec.sources.credentialsSecret names a Secret that must exist in the job's namespace; "
         "create it, then apply the job again)";
}

FetchExit classify_fetch_exit(int code, const std::string& why) {
  if (why == "OOMKilled") return {Reason::kOOMKilled, false};
  if (code == kExitUserError) return {Reason::kSourceUnavailable, true};
  return {Reason::kWorkerFailed, false};  // kExitRetryable (the network, after its own retries)
}

std::vector<api::FetchedSource> parse_fetch_results(const std::string& termination_message) {
  const json j = json::parse(termination_message, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return {};
  try {
    return j.get<std::vector<api::FetchedSource>>();
  } catch (const json::exception&) {
    return {};  // anything in the pod may write there: not ours, not trusted
  }
}

}  // namespace kubetune::op
