#include "trainer/commands.h"

#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/contracts.h"
#include "common/log.h"
#include "common/strict_json.h"
#include "common/train_config.h"
#include "trainer/data/dataset.h"
#include "trainer/device/device.h"
#include "trainer/inputs/run_inputs.h"
#include "trainer/io/hf_checkpoint.h"
#include "trainer/io/peft_adapter.h"
#include "trainer/loop/evaluate.h"
#include "trainer/loop/train_loop.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/launcher.h"
#include "trainer/plan/preflight.h"

namespace kubetune {
namespace {

// The config, or nothing after logging why it was refused.
std::optional<TrainConfig> read_config(const std::string& config_path) {
  try {
    return load_train_config(config_path);
  } catch (const std::exception& e) {
    log::error() << e.what();
    return std::nullopt;
  }
}

// Offloaded checkpoints are the mode for the longest sequences, whose [tokens, intermediate]
// activations (8 GiB each at 300k tokens on an 8B) fragment the caching allocator's fixed
// segments: 294,912 tokens of 8B QLoRA ran out of memory with 10.9 GiB reserved but unusable, and
// trained within the preflight's 74.8 GiB with expandable segments (bench/README.md, session 17).
// Set before the first CUDA allocation reads it; a value the user set is kept.
void prefer_expandable_segments(const TrainConfig& c) {
  // PYTORCH_ALLOC_CONF is the variable's newer name: a user's setting under either one stays.
  if (c.model.offload_checkpoints && !std::getenv("PYTORCH_ALLOC_CONF"))
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 0);
}

int train_command(const std::string& config_path) {
  const auto config = read_config(config_path);
  if (!config) return kExitUserError;
  prefer_expandable_segments(*config);
  return train::run_training(*config);
}

// The report is one JSON object on stdout; exit 2 when the job would fail (invalid data, too big,
// a model folder that cannot be read). `termination_log`, when set, gets a compact copy of the
// report: the operator's preflight pod writes it to /dev/termination-log, which Kubernetes keeps
// in the pod's status (at most 4 KiB), where the operator reads it.
int preflight_command(const std::string& config_path, const train::PreflightOptions& options,
                      const std::string& termination_log) {
  train::PreflightReport result;
  try {
    result = train::preflight(load_train_config(config_path), options);
  } catch (const std::exception& e) {  // the config, the model folder or the dataset file
    result.verdict = api::PreflightVerdict::kInputInvalid;
    result.report = {};
    result.report.verdict = *result.verdict;
    result.report.message = e.what();
  }
  const nlohmann::json report = result.report;
  std::cout << report.dump(2) << std::endl;
  if (!termination_log.empty())
    std::ofstream(termination_log) << train::compact_report(report, kTerminationMessageBytes);
  if (!result.verdict) return 0;
  log::error() << *result.verdict << ": " << result.report.message.value_or("");
  return kExitUserError;
}

// Preference pairs (the loss and answers above are the chosen ones'): how many of them the model
// finds the chosen answer likelier for, per token, than the rejected one.
void print_pair_preference(model::CausalLMImpl& model, const std::vector<data::Example>& pairs,
                           const train::EvalResult& chosen, int batch_size, int32_t pad_id,
                           const torch::Device& device, torch::Dtype dtype) {
  std::vector<data::Example> rejected;
  for (const auto& pair : pairs) rejected.push_back(*pair.rejected);
  const auto other = train::evaluate(model, rejected, batch_size, pad_id, device, dtype, nullptr);
  auto mean_loss = [](const train::ExampleScore& s) {
    return s.n_targets ? s.loss_sum / static_cast<double>(s.n_targets) : 0.0;
  };
  size_t preferred = 0;
  for (size_t i = 0; i < pairs.size(); ++i)
    preferred += mean_loss(chosen.per_example[i]) < mean_loss(other.per_example[i]) ? 1 : 0;
  std::cout << "pairs " << pairs.size() << " | chosen answer likelier per token than the rejected "
            << "one in "
            << log::fixed(100.0 * static_cast<double>(preferred) /
                              static_cast<double>(std::max<size_t>(1, pairs.size())),
                          1)
            << "%" << std::endl;
}

// Unpaired examples (kto): the mean loss per completion token of the desirable completions and of
// the undesirable ones; training should lower the first and raise the second.
void print_unpaired_preference(const std::vector<data::Example>& examples,
                               const train::EvalResult& result) {
  double loss[2] = {0, 0}, targets[2] = {0, 0};
  for (size_t i = 0; i < examples.size(); ++i) {
    loss[examples[i].desirable] += result.per_example[i].loss_sum;
    targets[examples[i].desirable] += static_cast<double>(result.per_example[i].n_targets);
  }
  std::cout << "mean loss per completion token: desirable "
            << log::fixed(loss[1] / std::max(1.0, targets[1]), 4) << ", undesirable "
            << log::fixed(loss[0] / std::max(1.0, targets[0]), 4) << std::endl;
}

int eval_command(const std::string& model_dir, const std::string& adapter_dir,
                 const std::string& data_path, int batch_size, int max_length, bool as_json,
                 int show) {
  const auto device = train::pick_device(0);
  const auto dtype = train::compute_dtype(api::ModelDtype::kAuto, device);
  auto text = train::load_text_tools(model_dir);
  data::DatasetOptions options;
  options.max_length = max_length;
  options.preference = data::preference_format_of(data_path);
  auto examples = data::load_jsonl(data_path, text.tokenizer, text.chat.get(), options);
  auto model = train::load_model(model_dir, device, dtype, std::nullopt, false, 0);
  if (!adapter_dir.empty()) {
    io::load_peft_adapter(model, adapter_dir);
    model->to(device);
  }
  auto result = train::evaluate(*model, examples, batch_size, text.pad_id, device, dtype, nullptr);
  if (as_json) {
    nlohmann::json records = nlohmann::json::array();
    for (size_t i = 0; i < examples.size(); ++i) {
      const auto& s = result.per_example[i];
      records.push_back({{"line", examples[i].source_line},
                         {"mean_loss", s.n_targets ? s.loss_sum / s.n_targets : 0.0},
                         {"n_targets", s.n_targets},
                         {"accuracy", s.n_targets ? double(s.n_correct) / s.n_targets : 0.0}});
    }
    std::cout << nlohmann::json{{"mean_loss", result.mean_loss},
                                {"n_targets", result.n_targets},
                                {"accuracy", result.accuracy},
                                {"records", records}}
                     .dump()
              << std::endl;
  } else {
    // A few of them as a person reads them: the prompt, the reference, the model's answer (each
    // on one line, quoted as JSON strings so that newlines and spaces show).
    auto quoted = [&](const std::vector<int32_t>& ids) {
      return nlohmann::json(text.tokenizer.decode(ids, true)).dump();
    };
    for (size_t i = 0; i < examples.size() && i < static_cast<size_t>(std::max(0, show)); ++i) {
      const std::string want = quoted(train::reference_answer(examples[i]));
      const std::string got = quoted(train::greedy_answer(*model, examples[i], device, dtype));
      std::cout << "line " << examples[i].source_line << ": "
                << quoted(train::prompt_of(examples[i])) << " -> " << got
                << (got == want ? " (right)" : " (expected " + want + ")") << "\n";
    }
    std::cout << "records " << examples.size() << " | target tokens " << result.n_targets
              << " | mean loss " << result.mean_loss << " | token accuracy " << result.accuracy
              << std::endl;
    if (options.preference == data::Format::kUnpairedPreference)
      print_unpaired_preference(examples, result);
    if (options.preference == data::Format::kPreference)
      print_pair_preference(*model, examples, result, batch_size, text.pad_id, device, dtype);
  }
  return 0;
}

int tokenize_command(const std::string& tokenizer_dir, bool chat, bool as_json) {
  auto text = train::load_text_tools(tokenizer_dir);
  std::string line;
  size_t line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json record = parse_json_strict(line, "stdin:" + std::to_string(line_number));
    std::vector<int32_t> ids;
    if (record.contains("messages")) {
      if (!chat)
        throw std::runtime_error("stdin:" + std::to_string(line_number) +
                                 ": a messages record needs --chat");
      if (!text.chat)
        throw std::runtime_error(
            tokenizer_dir +
            ": no chat template (tokenizer_config.json chat_template or chat_template.jinja)");
      ids = text.tokenizer.encode(text.chat->render(record["messages"], false,
                                                    {{"bos_token", text.tokenizer.bos_token()},
                                                     {"eos_token", text.tokenizer.eos_token()}}),
                                  false);
    } else if (record.contains("text") && record["text"].is_string()) {
      ids = text.tokenizer.encode(record["text"].get<std::string>(), false);
    } else {
      throw std::runtime_error("stdin:" + std::to_string(line_number) +
                               ": expected {\"text\": ...} or {\"messages\": [...]}");
    }
    if (as_json) {
      std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
    }
  }
  return 0;
}

int init_model_command(const std::string& config_path, const std::string& tokenizer_dir,
                       const std::string& out_dir, uint64_t seed) {
  auto config = model::ModelConfig::from_json(read_json_file_strict(config_path), config_path);
  torch::manual_seed(seed);
  model::CausalLM model(config);
  io::save_hf_model(model, out_dir, torch::kFloat32);
  io::copy_tokenizer_files(tokenizer_dir, out_dir);
  log::info() << "wrote a randomly initialised " << config.model_type << " model ("
              << config.num_parameters() << " parameters) to " << out_dir;
  return 0;
}

// `--log-format text|json` before the command (`kubetune-trainer --log-format json train ...`),
// taken out of argv so that `launch` sees only its own options; default: $KUBETUNE_LOG_FORMAT.
log::Format take_log_format(int& argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--log-format") {
    const log::Format f = log::parse_format(argv[2]);
    for (int i = 3; i <= argc; ++i) argv[i - 2] = argv[i];
    argc -= 2;
    return f;
  }
  return log::format_from_env();
}

int dispatch(int argc, char** argv) {
  // `launch` passes everything after `--` to the children untouched; it parses the rest itself.
  if (argc >= 2 && std::string(argv[1]) == "launch") {
    log::setup(log::format_from_env(), "launcher");
    return parallel::launch_main(std::vector<std::string>(argv + 2, argv + argc));
  }

  CLI::App app{"kubetune-trainer: fine-tune Hugging Face models (LoRA or full) on CPUs and GPUs"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all");
  app.footer("global option, before the command: --log-format text|json (default text)");

  std::string config;
  auto* train = app.add_subcommand("train", "fine-tune from a YAML/JSON config");
  train->add_option("--config", config, "training config file")->required();

  train::PreflightOptions preflight_options;
  double gpu_memory_gib = 0;
  auto* preflight = app.add_subcommand(
      "preflight",
      "read the model's config and the whole dataset on the CPU; print a JSON report (data, "
      "steps, estimated GPU memory); exit 2 when the data is invalid or the job does not fit");
  preflight->add_option("--config", config, "training config file")->required();
  preflight
      ->add_option("--world-size", preflight_options.world_size,
                   "processes of the job (pods x GPUs per pod)")
      ->check(CLI::PositiveNumber);
  preflight
      ->add_option("--gpu-memory-gib", gpu_memory_gib,
                   "memory of one GPU: the job does not fit when the estimate exceeds it")
      ->check(CLI::PositiveNumber);
  std::string termination_log;
  preflight->add_option("--termination-log", termination_log,
                        "also write a compact report (at most 4 KiB) to this file, e.g. "
                        "/dev/termination-log in a pod");

  std::string model_dir, adapter_dir, data_path;
  int batch_size = 8, max_length = 1 << 20;
  bool json = false;
  auto* eval = app.add_subcommand("eval", "mean next-token loss of a model (+adapter) on JSONL");
  eval->add_option("--model", model_dir, "Hugging Face model folder")->required();
  eval->add_option("--adapter", adapter_dir, "PEFT adapter folder");
  eval->add_option("--data", data_path, "JSONL file")->required();
  eval->add_option("--batch-size", batch_size, "records per forward pass");
  eval->add_option("--max-length", max_length, "truncate records to this many tokens");
  eval->add_flag("--json", json, "print one JSON object");
  int show = 0;
  eval->add_option("--show", show,
                   "also print the first N records: prompt, expected answer, the model's greedy "
                   "answer")
      ->check(CLI::Range(0, 1000));

  std::string tokenizer_dir;
  bool chat = false;
  auto* tokenize = app.add_subcommand("tokenize", "token ids of JSONL records read from stdin");
  tokenize->add_option("--tokenizer", tokenizer_dir, "folder with tokenizer.json")->required();
  tokenize->add_flag("--chat", chat, "render {\"messages\"} with the chat template first");
  tokenize->add_flag("--json", json, "one JSON object per line");

  std::string model_config, out_dir;
  uint64_t seed = 0;
  auto* init = app.add_subcommand("init-model", "write a randomly initialised model folder");
  init->add_option("--config", model_config, "model config.json")->required();
  init->add_option("--tokenizer", tokenizer_dir, "folder with tokenizer files to copy")->required();
  init->add_option("--out", out_dir, "output folder")->required();
  init->add_option("--seed", seed, "random seed");

  app.add_subcommand("launch", "start one process per GPU / CPU worker (see launch --help)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUserError;
  }
  if (*train) return train_command(config);
  if (*preflight) {
    if (gpu_memory_gib > 0) preflight_options.gpu_memory_gib = gpu_memory_gib;
    return preflight_command(config, preflight_options, termination_log);
  }
  if (*eval) {
    return eval_command(model_dir, adapter_dir, data_path, batch_size, max_length, json, show);
  }
  if (*tokenize) return tokenize_command(tokenizer_dir, chat, json);
  if (*init) return init_model_command(model_config, tokenizer_dir, out_dir, seed);
  return 1;
}

}  // namespace

int run_cli(int argc, char** argv) {
  try {
    log::setup(take_log_format(argc, argv), "trainer");
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;  // no logger yet
    return kExitUserError;
  }
  try {
    return dispatch(argc, argv);
  } catch (const ConfigError& e) {
    log::error() << e.what();
    return kExitUserError;
  } catch (const train::UserInputError& e) {
    log::error() << e.what();
    return kExitUserError;
  } catch (const parallel::CollectiveError& e) {
    log::error() << e.what();
    return kExitRetryable;
  } catch (const c10::DistError& e) {
    log::error() << "collective failed: " << e.what_without_backtrace();
    return kExitRetryable;
  } catch (const c10::Error& e) {
    log::error() << e.what_without_backtrace();
    return 1;
  } catch (const std::exception& e) {
    log::error() << e.what();
    return 1;
  }
}

}  // namespace kubetune
