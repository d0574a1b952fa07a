#include "operator/local/fetched_sources.h"

#include <cstdlib>
#include <vector>

#include "common/contracts.h"
#include "operator/local/child_process.h"
#include "operator/render/sources.h"

namespace kubetune::op::local {

std::string kubetune_cache_dir() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/kubetune";
}

std::string run_kubetune_fetch(const std::vector<std::string>& args) {
  const char* fetch = std::getenv("KUBETUNE_FETCH");
  std::vector<std::string> argv = {fetch ? fetch : "kubetune-fetch"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::pair<int, std::string> ran;
  try {
    ran = run_capturing_stdout(argv);
  } catch (const std::exception& e) {
    throw FetchFailed(kExitUserError,
                      std::string(e.what()) +
                          " (hf:// and s3:// sources and outputs need kubetune-fetch: pip install "
                          "./fetch, or set KUBETUNE_FETCH)");
  }
  if (ran.first != 0) {
    throw FetchFailed(ran.first, "kubetune-fetch exited " + std::to_string(ran.first) +
                                     " (its last lines above say why)");
  }
  return ran.second;
}

FineTuneJob with_fetched_sources(const FineTuneJob& job, const std::string& links_dir) {
  const std::vector<RemoteSource> sources = remote_sources(job.spec);
  if (sources.empty()) return job;
  const char* cache = std::getenv("KUBETUNE_SOURCE_CACHE");
  const std::string cache_dir = cache ? cache : kubetune_cache_dir() + "/sources";
  run_kubetune_fetch(fetch_arguments(sources, {}, cache_dir, links_dir));
  FineTuneJob local = job;
  local.train_config = with_linked_sources(job.train_config, links_dir);
  return local;
}

}  // namespace kubetune::op::local
