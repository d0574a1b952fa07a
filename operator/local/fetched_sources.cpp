#include "operator/local/fetched_sources.h"

#include <cstdlib>
#include <vector>

#include "common/contracts.h"
#include "operator/local/child_process.h"
#include "operator/render/sources.h"

namespace kubetune::op::local {

FineTuneJob with_fetched_sources(const FineTuneJob& job, const std::string& links_dir) {
  const std::vector<RemoteSource> sources = remote_sources(job.spec);
  if (sources.empty()) return job;
  const char* fetch = std::getenv("KUBETUNE_FETCH");
  const char* cache = std::getenv("KUBETUNE_SOURCE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string cache_dir =
      cache ? cache : std::string(home ? home : ".") + "/.cache/kubetune/sources";
  std::vector<std::string> argv = {fetch ? fetch : "kubetune-fetch"};
  for (auto& a : fetch_arguments(sources, {}, cache_dir, links_dir)) argv.push_back(a);
  int code = 0;
  try {
    code = run_capturing_stdout(argv).first;
  } catch (const std::exception& e) {
    throw FetchFailed(kExitUserError,
                      std::string(e.what()) +
                          " (hf:// and s3:// sources need kubetune-fetch: pip install ./fetch, "
                          "or set KUBETUNE_FETCH)");
  }
  if (code != 0) {
    throw FetchFailed(
        code, "kubetune-fetch exited " + std::to_string(code) + " (its last lines above say why)");
  }
  FineTuneJob local = job;
  local.train_config = with_linked_sources(job.train_config, links_dir);
  return local;
}

}  // namespace kubetune::op::local
