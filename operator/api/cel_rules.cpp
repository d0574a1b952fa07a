#include "operator/api/cel_rules.h"

#include <regex>
#include <set>

#include "common/preference_refusals.h"
#include "common/source_forms.h"
#include "common/train_config.h"
#include "operator/api/crd.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

// `dir` is `mount` or below it ("/data" holds "/data/out" but not "/data2").
bool is_under(const std::string& dir, const std::string& mount) {
  return dir == mount || dir.rfind(mount + "/", 0) == 0;
}

bool on_some_volume(const json& spec, const std::string& dir) {
  for (const auto& v : spec.value("volumes", json::array())) {
    if (v.contains("mountPath") && v["mountPath"].is_string() &&
        is_under(dir, v["mountPath"].get<std::string>())) {
      return true;
    }
  }
  return false;
}

std::string string_at(const json& obj, const char* a, const char* b) {
  if (!obj.contains(a) || !obj[a].is_object() || !obj[a].contains(b) || !obj[a][b].is_string()) {
    return "";
  }
  return obj[a][b].get<std::string>();
}

long long int_at(const json& obj, const char* a, const char* b, long long fallback) {
  if (!obj.contains(a) || !obj[a].is_object() || !obj[a].contains(b) || !obj[a][b].is_number()) {
    return fallback;
  }
  return obj[a][b].get<long long>();
}

// training.objective is set and is not sft (the schema's default is sft).
bool preference_objective(const json& spec) {
  const std::string objective = string_at(spec, "training", "objective");
  return !objective.empty() && objective != "sft";
}

// training.objective trains on preference pairs: a preference objective other than kto.
bool pair_objective(const json& spec) {
  return preference_objective(spec) && string_at(spec, "training", "objective") != "kto";
}

// The CEL rule and its twin for one source field (`field` of the object at the rule's place):
// a local path, or one of the remote forms of common/source_forms.h.
CelRule source_rule(const std::string& where, const std::string& field, bool model, bool optional,
                    const std::string& message) {
  const std::string f = "self." + field;
  std::string remote_forms = model ? "(!" + f + ".startsWith('hf://datasets/') && " + f +
                                         ".matches('" + kHubModelPattern + "'))"
                                   : "((" + f + ".matches('" + kHubDatasetFilePattern + "') || " +
                                         f + ".matches('" + kHubDatasetSplitPattern + "')) && !" +
                                         f + ".contains('..'))";
  // A path meant as a remote source (its scheme in any case, any number of slashes) is held to
  // the remote forms; any other is a local path.
  std::string rule = "!" + f + ".matches('" + kSourceSchemePattern + "') || " + remote_forms +
                     " || (" + f + ".matches('" + kS3Pattern + "') && !" + f + ".contains('..'))";
  if (optional) rule = "!has(" + f + ") || " + rule;
  return {where, rule, message, [field, model](const json& self, const json*) {
            const auto it = self.find(field);
            if (it == self.end() || !it->is_string()) return true;
            return is_local_or_remote_source(it->get<std::string>(), model);
          }};
}

// The CEL rule and its twin for the `dir` of the object at `where` (output, checkpoint): a local
// folder, or an s3:// prefix the runners upload to (a near miss of one is refused).
CelRule remote_dir_rule(const std::string& where, const std::string& message) {
  return {where,
          std::string("!has(self.dir) || !self.dir.matches('") + kSourceSchemePattern +
              "') || (self.dir.matches('" + kS3Pattern + "') && !self.dir.contains('..'))",
          message, [](const json& self, const json*) {
            return is_local_or_remote_output(self.value("dir", std::string()));
          }};
}

// Without the preflight nothing resolves a source's revision once for all: each worker and each
// restarted gang would resolve a branch on its own, and ranks could read different commits.
CelRule sources_need_preflight() {
  std::string remote;
  for (const std::string f : {"self.model.path", "self.data.train"}) {
    remote += (remote.empty() ? "" : " || ") + f + ".startsWith('hf://') || " + f +
              ".startsWith('s3://')";
  }
  remote +=
      " || (has(self.data.validation) && (self.data.validation.startsWith('hf://') || "
      "self.data.validation.startsWith('s3://')))";
  return {
      "spec",
      "!has(self.runPolicy) || !has(self.runPolicy.preflight) || self.runPolicy.preflight || "
      "!(" +
          remote + ")",
      "hf:// and s3:// sources need runPolicy.preflight: its fetch resolves each revision once, "
      "for every worker",
      [](const json& self, const json*) {
        const json run = self.value("runPolicy", json::object());
        if (!run.is_object() || run.value("preflight", true) != false) return true;
        const json model = self.value("model", json::object());
        const json data = self.value("data", json::object());
        for (const json* part : {&model, &data}) {
          for (const auto& [key, value] : part->items()) {
            if ((key == "path" || key == "train" || key == "validation") && value.is_string() &&
                is_remote_source(value.get<std::string>()))
              return false;
          }
        }
        return true;
      }};
}

// The spec fields that a running job keeps: all but runPolicy. A field that is required or has
// a default is always present after defaulting; an optional one may come or go.
struct ImmutableField {
  std::string name;
  bool always_present;
};

std::vector<ImmutableField> immutable_spec_fields() {
  std::vector<ImmutableField> out;
  const json& spec = finetunejob_schema()["spec"];
  const json required = spec.value("required", json::array());
  for (const auto& [name, property] : spec["properties"].items()) {
    if (name == "runPolicy") continue;
    const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
    out.push_back({name, is_required || property.contains("default")});
  }
  return out;
}

CelRule spec_immutable_unless_suspended() {
  std::string equal;
  for (const auto& f : immutable_spec_fields()) {
    const std::string a = "self." + f.name, b = "oldSelf." + f.name;
    equal += equal.empty() ? "" : " && ";
    equal += f.always_present ? a + " == " + b
                              : "has(" + a + ") == has(" + b + ") && (!has(" + a + ") || " + a +
                                    " == " + b + ")";
  }
  return {"spec", "oldSelf.runPolicy.suspend || (" + equal + ")",
          "only spec.runPolicy can change while a job runs: set runPolicy.suspend to true first "
          "(its pods are deleted), then edit the spec; when resumed, the gang starts from the new "
          "spec and its last checkpoint",
          [](const json& self, const json* old) {
            if (old->value("runPolicy", json::object()).value("suspend", false)) return true;
            for (const auto& f : immutable_spec_fields()) {
              if (self.value(f.name, json()) != old->value(f.name, json())) return false;
            }
            return true;
          }};
}

// s3:// checkpoints are the CRD's rule alone (the trainer writes to the local folder it is given):
// rank 0's pod uploads the checkpoints its processes write, so the job must be that one pod.
constexpr const char* kS3CheckpointsNeedOnePod =
    "checkpoint.dir s3:// holds the checkpoints of one pod's processes: set workers.replicas to 1 "
    "(a job of several pods keeps its checkpoints on a ReadWriteMany volume)";

std::vector<CelRule> make_rules() {
  std::vector<CelRule> rules;
  rules.push_back(
      {"",
       "self.metadata.name.size() <= 50 && "
       "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
       "metadata.name must be a DNS-1035 label (lower-case letters, digits, '-', starting with a "
       "letter) of at most 50 characters: it names the Service and the pods' host names",
       [](const json& self, const json*) {
         static const std::regex dns1035("^[a-z]([-a-z0-9]*[a-z0-9])?$");
         const std::string name = string_at(self, "metadata", "name");
         // generateName objects have no name yet; the API server checks the final one.
         return name.empty() || (name.size() <= 50 && std::regex_match(name, dns1035));
       }});
  rules.push_back(
      {"spec",
       "self.output.dir.startsWith('s3://') || (has(self.volumes) && self.volumes.exists(v, "
       "self.output.dir == v.mountPath || self.output.dir.startsWith(v.mountPath + '/')))",
       "output.dir must be under the mountPath of one of spec.volumes, or s3://BUCKET/PREFIX: a "
       "pod's own filesystem is lost when the gang restarts",
       [](const json& self, const json*) {
         const std::string dir = string_at(self, "output", "dir");
         return dir.rfind("s3://", 0) == 0 || on_some_volume(self, dir);
       }});
  rules.push_back(
      {"spec",
       "!has(self.checkpoint) || !has(self.checkpoint.dir) || self.checkpoint.dir == '' || "
       "self.checkpoint.dir.startsWith('s3://') || "
       "(has(self.volumes) && self.volumes.exists(v, self.checkpoint.dir == v.mountPath || "
       "self.checkpoint.dir.startsWith(v.mountPath + '/')))",
       "checkpoint.dir must be under the mountPath of one of spec.volumes, or s3://BUCKET/PREFIX, "
       "so that restarted workers can resume from it",
       [](const json& self, const json*) {
         const std::string dir = string_at(self, "checkpoint", "dir");
         return dir.empty() || dir.rfind("s3://", 0) == 0 || on_some_volume(self, dir);
       }});
  rules.push_back({"spec",
                   "!has(self.checkpoint) || !has(self.checkpoint.dir) || "
                   "!self.checkpoint.dir.startsWith('s3://') || !has(self.workers) || "
                   "!has(self.workers.replicas) || self.workers.replicas == 1",
                   kS3CheckpointsNeedOnePod, [](const json& self, const json*) {
                     return string_at(self, "checkpoint", "dir").rfind("s3://", 0) != 0 ||
                            int_at(self, "workers", "replicas", 1) == 1;
                   }});
  rules.push_back({"spec",
                   "!has(self.distributed) || !has(self.distributed.backend) || "
                   "self.distributed.backend != 'nccl' || self.workers.gpusPerWorker > 0",
                   "distributed.backend nccl needs GPUs: set workers.gpusPerWorker > 0 or use "
                   "backend gloo/auto",
                   [](const json& self, const json*) {
                     return string_at(self, "distributed", "backend") != "nccl" ||
                            int_at(self, "workers", "gpusPerWorker", 1) > 0;
                   }});
  rules.push_back({"spec",
                   "!has(self.training) || !has(self.training.microBatchSize) || "
                   "type(self.training.microBatchSize) != string || "
                   "(has(self.training.globalBatchSize) && self.training.globalBatchSize > 0)",
                   kAutoMicroBatchNeedsGlobalBatch, [](const json& self, const json*) {
                     const json training = self.value("training", json::object());
                     return !training.value("microBatchSize", json()).is_string() ||
                            training.value("globalBatchSize", 0LL) > 0;
                   }});
  rules.push_back({"spec",
                   "!has(self.model.precision) || self.model.precision != 'fp8' || "
                   "!has(self.model.dtype) || "
                   "self.model.dtype != 'float32'",
                   kFp8NeedsBf16, [](const json& self, const json*) {
                     return string_at(self, "model", "precision") != "fp8" ||
                            string_at(self, "model", "dtype") != "float32";
                   }});
  rules.push_back({"spec",
                   "!has(self.model.precision) || self.model.precision != 'fp8' || "
                   "!has(self.distributed) || "
                   "!has(self.distributed.sharding) || self.distributed.sharding != 'full' || "
                   "(has(self.method) && has(self.method.type) && self.method.type != 'lora')",
                   kFp8LoraBaseNotSharded, [](const json& self, const json*) {
                     const std::string method = string_at(self, "method", "type");
                     return string_at(self, "model", "precision") != "fp8" ||
                            string_at(self, "distributed", "sharding") != "full" ||
                            (!method.empty() && method != "lora");
                   }});
  // Pairs for dpo, ipo, simpo and orpo; unpaired examples for kto; neither for sft.
  rules.push_back({"spec",
                   "!has(self.training) || !has(self.training.objective) || "
                   "self.training.objective == 'sft' || self.training.objective == 'kto' || "
                   "!has(self.data.format) || self.data.format == 'auto' || "
                   "self.data.format == 'preference'",
                   kPreferenceObjectiveNeedsPairs, [](const json& self, const json*) {
                     const std::string format = string_at(self, "data", "format");
                     return !pair_objective(self) || format.empty() || format == "auto" ||
                            format == "preference";
                   }});
  rules.push_back({"spec",
                   "!has(self.data.format) || self.data.format != 'preference' || "
                   "(has(self.training) && has(self.training.objective) && "
                   "self.training.objective != 'sft' && self.training.objective != 'kto')",
                   kPairsNeedPreferenceObjective, [](const json& self, const json*) {
                     return string_at(self, "data", "format") != "preference" ||
                            pair_objective(self);
                   }});
  rules.push_back({"spec",
                   "!has(self.training) || !has(self.training.objective) || "
                   "self.training.objective != 'kto' || !has(self.data.format) || "
                   "self.data.format == 'auto' || self.data.format == 'unpaired_preference'",
                   kKtoNeedsUnpairedExamples, [](const json& self, const json*) {
                     const std::string format = string_at(self, "data", "format");
                     return string_at(self, "training", "objective") != "kto" || format.empty() ||
                            format == "auto" || format == "unpaired_preference";
                   }});
  rules.push_back({"spec",
                   "!has(self.data.format) || self.data.format != 'unpaired_preference' || "
                   "(has(self.training) && has(self.training.objective) && "
                   "self.training.objective == 'kto')",
                   kUnpairedExamplesNeedKto, [](const json& self, const json*) {
                     return string_at(self, "data", "format") != "unpaired_preference" ||
                            string_at(self, "training", "objective") == "kto";
                   }});
  rules.push_back({"spec",
                   "!has(self.data.packing) || !self.data.packing || !has(self.training) || "
                   "!has(self.training.objective) || self.training.objective == 'sft'",
                   kPairsAreNotPacked, [](const json& self, const json*) {
                     const json data = self.value("data", json::object());
                     return !data.value("packing", false) || !preference_objective(self);
                   }});
  rules.push_back({"spec",
                   "!has(self.training) || !has(self.training.preference) || "
                   "!has(self.training.preference.labelSmoothing) || "
                   "double(self.training.preference.labelSmoothing) < 0.5",
                   kLabelSmoothingBelowHalf, [](const json& self, const json*) {
                     const json training = self.value("training", json::object());
                     const json preference = training.value("preference", json::object());
                     return preference.value("labelSmoothing", 0.0) < 0.5;
                   }});
  rules.push_back(spec_immutable_unless_suspended());
  rules.push_back(source_rule("spec.model", "path", true, false,
                              std::string("model.path: ") + kRemoteModelForms));
  for (const std::string field : {"train", "validation"}) {
    // has() for train too: a missing train is the schema's `required` error, not this rule's.
    rules.push_back(
        source_rule("spec.data", field, false, true, "data." + field + ": " + kRemoteFileForms));
  }
  rules.push_back(sources_need_preflight());
  rules.push_back(remote_dir_rule("spec.output", std::string("output.dir: ") + kRemoteOutputForms));
  rules.push_back(
      remote_dir_rule("spec.checkpoint", std::string("checkpoint.dir: ") + kRemoteCheckpointForms));
  rules.push_back({"spec",
                   "!has(self.output.gguf) || size(self.output.gguf) == 0 || "
                   "(has(self.output.saveMerged) && self.output.saveMerged) || "
                   "(has(self.method) && has(self.method.type) && self.method.type == 'full')",
                   kGgufNeedsAModelFolder, [](const json& self, const json*) {
                     const json output = self.value("output", json::object());
                     return output.value("gguf", json::array()).empty() ||
                            output.value("saveMerged", false) ||
                            string_at(self, "method", "type") == "full";
                   }});
  rules.push_back({"spec",
                   "!has(self.volumes) || self.volumes.all(v, self.volumes.filter(w, w.mountPath "
                   "== v.mountPath).size() == 1)",
                   "two of spec.volumes have the same mountPath: a pod cannot mount both there",
                   [](const json& self, const json*) {
                     std::set<std::string> seen;
                     for (const auto& v : self.value("volumes", json::array())) {
                       if (!seen.insert(v.value("mountPath", "")).second) return false;
                     }
                     return true;
                   }});
  rules.push_back({"spec.volumes[]", "has(self.persistentVolumeClaim) != has(self.hostPath)",
                   "exactly one of persistentVolumeClaim or hostPath must be set",
                   [](const json& self, const json*) {
                     return self.contains("persistentVolumeClaim") != self.contains("hostPath");
                   }});
  rules.push_back({"spec.volumes[]", "!self.name.startsWith('kubetune-')",
                   "volume names starting with kubetune- are reserved for the operator",
                   [](const json& self, const json*) {
                     return !self.contains("name") || !self["name"].is_string() ||
                            self["name"].get<std::string>().rfind("kubetune-", 0) != 0;
                   }});
  return rules;
}

}  // namespace

const std::vector<CelRule>& cel_rules() {
  static const std::vector<CelRule> rules = make_rules();
  return rules;
}

CelEvaluators cel_evaluators() {
  CelEvaluators out;
  for (const auto& r : cel_rules()) out[r.rule] = r.check;
  return out;
}

}  // namespace kubetune::op
