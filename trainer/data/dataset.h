#pragma once
// Loading a JSONL training file into tokenized, loss-masked, truncated examples.
//
// Record formats (the ones Hugging Face TRL users know):
//   {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...]}
//   {"prompt": "...", "completion": "..."}   (or prompt/completion as message lists)
//   {"text": "..."}
//   {"prompt": "...", "chosen": "...", "rejected": "..."}   (or message lists: preference_pair.h)
//   {"prompt": "...", "completion": "...", "label": true}   (kto's unpaired examples, the same)
// Datasets published in other shapes (ShareGPT, Alpaca, columns of other names) are read as these
// first: column_mapping.h.
// With LossOn::kCompletion only assistant turns / the completion (plus their end-of-turn marker or
// EOS) are targets; with LossOn::kAll every token is. Text records always train on every token.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/finetunejob_types.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "trainer/data/example.h"

namespace kubetune::data {

// The schema's data.format and data.lossOn (common/finetunejob_schema.json), by shorter names.
using Format = api::DataFormat;
using LossOn = api::DataLossOn;

struct DatasetOptions {
  Format format = Format::kAuto;
  LossOn loss_on = LossOn::kCompletion;
  int max_length = 2048;  // examples are truncated to this many tokens, keeping the start
  // The records training.objective takes, when it is a preference objective: kPreference (pairs:
  // dpo, ipo, simpo, orpo) or kUnpairedPreference (kto). Every record must then be of it, and none
  // may be a preference record otherwise.
  std::optional<Format> preference = std::nullopt;
  // data.columns: the dataset's own column names for our fields (column_mapping.h).
  api::DataColumns columns{};
};

// Reads a JSONL file, one record per line; blank lines are skipped. `chat` may be null but is
// required by message records. Every user-caused problem throws std::runtime_error whose message
// starts with "path:LINE: " (or "path: " for whole-file problems such as an empty dataset).
std::vector<Example> load_jsonl(const std::string& path, const text::Tokenizer& tokenizer,
                                const text::ChatTemplate* chat, const DatasetOptions& options);

// The format of the file's first record when it is a preference one (pairs, or kto's unpaired
// examples): what `eval` reads the file as.
std::optional<Format> preference_format_of(const std::string& path);

// A whole file read without stopping at the first bad line: what the preflight reports.
struct DatasetScan {
  struct BadLine {
    size_t line = 0;
    std::string error;  // "path:LINE: what"
  };
  std::vector<Example> examples;    // the valid records
  std::vector<BadLine> invalid;     // every invalid record, in file order
  std::vector<size_t> truncated;    // lines of the records cut to maxLength
  int64_t tokens = 0, targets = 0;  // over the valid records, after truncation
  std::string mapped;               // how the records were mapped (column_mapping.h), or empty
};

// Throws only for whole-file problems (cannot open, read error, bad options).
DatasetScan scan_jsonl(const std::string& path, const text::Tokenizer& tokenizer,
                       const text::ChatTemplate* chat, const DatasetOptions& options);

}  // namespace kubetune::data
