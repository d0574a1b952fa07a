// The remote sources `model.path`, `data.train` and `data.validation` accept besides a local path
// (issue: models and data from where they live). The CRD's CEL rules are written from these
// patterns (operator/api/cel_rules.cpp, RE2 syntax, also valid std::regex ECMAScript), and
// fetch/kubetune_fetch/sources.py parses the same forms; tests/fetch checks the two agree by
// running the CRD's rules in cel-python over the same examples.
#pragma once

#include <string>

namespace kubetune {

// A Hub name: letters, digits, '.', '_', '-', at most 96 characters, not starting with a symbol.
#define KUBETUNE_HUB_NAME "[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
#define KUBETUNE_HUB_REVISION "(@[A-Za-z0-9][A-Za-z0-9._/-]{0,199})?"

// hf://ORG/NAME[@REVISION]: a model repository.
inline constexpr const char* kHubModelPattern =
    "^hf://" KUBETUNE_HUB_NAME "/" KUBETUNE_HUB_NAME KUBETUNE_HUB_REVISION "$";
// hf://datasets/ORG/NAME/PATH[@REVISION]: one file of a dataset repository; PATH is names of
// letters, digits, '.', '_', '-' joined by '/' (no ".." anywhere: the rule says so apart).
inline constexpr const char* kHubDatasetFilePattern =
    "^hf://datasets/" KUBETUNE_HUB_NAME "/" KUBETUNE_HUB_NAME
    "/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*" KUBETUNE_HUB_REVISION "$";
// hf://datasets/ORG/NAME[@REVISION]?split=SPLIT[&subset=SUBSET]: one split of a dataset, every file
// it is made of, as datasets' load_dataset("ORG/NAME", SUBSET, split=SPLIT) finds them (Parquet
// shards, JSON, JSONL, CSV; the README's `configs`). Split and subset names: letters, digits, '.',
// '_', '-'. ('?' as a class: the same text is a C++ regex and a CEL string with no escaping.)
inline constexpr const char* kHubDatasetSplitPattern =
    "^hf://datasets/" KUBETUNE_HUB_NAME "/" KUBETUNE_HUB_NAME KUBETUNE_HUB_REVISION
    "[?]split=[A-Za-z0-9._-]{1,100}(&subset=[A-Za-z0-9._-]{1,100})?$";
// s3://BUCKET[/PREFIX]: an object or a prefix; bucket names as S3 allows them (no ".." anywhere:
// the rule says so apart, as a key with it would leave the cache folder).
inline constexpr const char* kS3Pattern = "^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$";

#undef KUBETUNE_HUB_NAME
#undef KUBETUNE_HUB_REVISION

// What is meant as a remote source, well-formed or not: the scheme in any case and any number of
// slashes ("HF://org/name", "hf:/org/name", "s3:///bucket"). Such a path is held to the remote
// forms above, so a near miss is refused where it is written instead of being taken for a local
// folder that does not exist. No local path a pod mounts starts like this.
inline constexpr const char* kSourceSchemePattern = "^([hH][fF]|[sS]3):";

// The messages that say which forms a remote source takes: the CRD's rules and the trainer's
// config check give the same.
inline constexpr const char* kRemoteModelForms =
    "a remote model is hf://ORG/NAME[@REVISION] (a Hugging Face model repository) or "
    "s3://BUCKET/PREFIX (no '..'), the scheme in lower case with two slashes";
inline constexpr const char* kRemoteFileForms =
    "remote data is hf://datasets/ORG/NAME/PATH[@REVISION] (one file), "
    "hf://datasets/ORG/NAME[@REVISION]?split=SPLIT[&subset=SUBSET] (a split of a dataset) or "
    "s3://BUCKET/KEY (no '..'), the scheme in lower case with two slashes";

inline constexpr const char* kRemoteOutputForms =
    "a remote output.dir is s3://BUCKET/PREFIX (no '..'), the scheme in lower case with two "
    "slashes: the output is uploaded there after the run";

inline constexpr const char* kRemoteCheckpointForms =
    "a remote checkpoint.dir is s3://BUCKET/PREFIX (no '..'), the scheme in lower case with two "
    "slashes: each checkpoint is uploaded there and a new gang resumes from the newest";

// A well-formed remote source, which kubetune-fetch fetches.
inline bool is_remote_source(const std::string& path) {
  return path.rfind("hf://", 0) == 0 || path.rfind("s3://", 0) == 0;
}

// Meant as a remote source (kSourceSchemePattern), well-formed or not.
bool looks_like_remote_source(const std::string& path);

// Whether `path` is a local path or one of the remote forms: a model repository (`model`) or
// data (one file, or a split of a dataset).
bool is_local_or_remote_source(const std::string& path, bool model);

// Whether `dir` is a local folder or an s3:// prefix (output.dir, checkpoint.dir).
bool is_local_or_remote_output(const std::string& dir);

}  // namespace kubetune
