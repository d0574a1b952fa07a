#include "trainer/data/dataset.h"

#include <stdexcept>

#include "trainer/data/column_mapping.h"
#include "trainer/data/jsonl_reader.h"
#include "trainer/data/preference_pair.h"
#include "trainer/data/record_encoder.h"
#include "trainer/data/record_format.h"

namespace kubetune::data {
namespace {

// Auto mode guesses per record; a file mixing formats is almost always a mistake (e.g. two
// datasets concatenated with different conventions), so it is rejected instead of guessed.
class FormatChecker {
 public:
  explicit FormatChecker(Format requested) : requested_(requested) {}

  Format check(const nlohmann::json& record, size_t line) {
    const Format format = resolve_format(record, requested_);
    if (first_ == Format::kAuto) {  // the first record
      first_ = format;
      first_line_ = line;
    } else if (first_ != format) {
      throw std::runtime_error(std::string("record is in ") + api::to_string(format) +
                               " format but line " + std::to_string(first_line_) + " is in " +
                               api::to_string(first_) +
                               " format; all records of a file must share one format");
    }
    return format;
  }

 private:
  Format requested_;
  Format first_ = Format::kAuto;  // the format of the first record; Auto before it
  size_t first_line_ = 0;
};

bool is_preference(Format format) {
  return format == Format::kPreference || format == Format::kUnpairedPreference;
}

// Preference objectives train on their records and nothing else; SFT cannot use them.
void check_objective_takes(Format format, std::optional<Format> preference) {
  if (preference == Format::kPreference && format != Format::kPreference)
    throw std::runtime_error(std::string("record is in ") + api::to_string(format) +
                             " format, but training.objective trains on preference pairs: "
                             "{\"prompt\", \"chosen\", \"rejected\"}");
  if (preference == Format::kUnpairedPreference && format != Format::kUnpairedPreference)
    throw std::runtime_error(std::string("record is in ") + api::to_string(format) +
                             " format, but training.objective kto trains on unpaired preference "
                             "examples: {\"prompt\", \"completion\", \"label\"}");
  if (!preference && format == Format::kPreference)
    throw std::runtime_error(
        "record is a preference pair (\"chosen\" and \"rejected\"): set training.objective to "
        "dpo, ipo, simpo or orpo to train on pairs");
  if (!preference && format == Format::kUnpairedPreference)
    throw std::runtime_error(
        "record is an unpaired preference example (\"prompt\", \"completion\" and \"label\"): "
        "set training.objective to kto to train on them");
}

// Keeps the start: the prompt and the beginning of the answer are what the model must see.
void truncate(Example& example, int max_length) {
  const size_t limit = static_cast<size_t>(max_length);
  if (example.input_ids.size() > limit) {
    example.input_ids.resize(limit);
    example.labels.resize(limit);
  }
}

// A prompt that fills data.maxLength leaves no answer to compare, and TRL drops such a pair or
// unpaired example: here it is a bad line.
void check_answer_fits(const Example& example, int max_length) {
  const size_t prompt = prompt_length(example);
  if (prompt >= static_cast<size_t>(max_length))
    throw std::runtime_error("the prompt alone has " + std::to_string(prompt) +
                             " tokens, at least data.maxLength (" + std::to_string(max_length) +
                             "), so no answer token is left to compare; raise data.maxLength or "
                             "shorten the prompt");
}

// A pair's two sequences are cut alike, keeping the start (TRL's keep_start).
void truncate_pair(Example& pair, int max_length, size_t line) {
  check_answer_fits(pair, max_length);
  truncate(pair, max_length);
  Example rejected = *pair.rejected;
  truncate(rejected, max_length);
  rejected.source_line = line;
  pair.rejected = std::make_shared<const Example>(std::move(rejected));
}

size_t length_of_both(const Example& example) {
  return example.input_ids.size() + (example.rejected ? example.rejected->input_ids.size() : 0);
}

void check_has_targets(const Example& example, size_t untruncated_length, int max_length) {
  if (count_targets(example) > 0) return;
  if (untruncated_length > example.input_ids.size()) {
    throw std::runtime_error("no target tokens left after truncating the record from " +
                             std::to_string(untruncated_length) + " to " +
                             std::to_string(max_length) +
                             " tokens (the prompt fills data.maxLength); raise data.maxLength "
                             "or shorten the prompt");
  }
  throw std::runtime_error("record has no target tokens (nothing for the loss to learn from)");
}

}  // namespace

DatasetScan scan_jsonl(const std::string& path, const text::Tokenizer& tokenizer,
                       const text::ChatTemplate* chat, const DatasetOptions& options) {
  if (options.max_length < 2) {
    throw std::runtime_error("data.maxLength: must be at least 2, got " +
                             std::to_string(options.max_length));
  }
  const EncodeContext context{tokenizer, chat, options.loss_on};
  const ColumnMapping mapping(options.format, options.columns);
  FormatChecker formats(mapping.format());
  JsonlReader reader(path);
  DatasetScan scan;
  scan.mapped = mapping.describe();
  nlohmann::json record;
  while (true) {
    bool reading = true;  // in reader.next(): its errors name the line unless the file broke
    try {
      if (!reader.next(record)) break;
      reading = false;
      record = mapping.apply(std::move(record));
      const Format format = formats.check(record, reader.line());
      check_objective_takes(format, options.preference);
      Example example = encode_record(record, format, context);
      const size_t untruncated_length = length_of_both(example);
      if (example.rejected) {
        truncate_pair(example, options.max_length, reader.line());
      } else if (format == Format::kUnpairedPreference) {
        check_answer_fits(example, options.max_length);
        truncate(example, options.max_length);
      } else {
        truncate(example, options.max_length);
        check_has_targets(example, untruncated_length, options.max_length);
      }
      example.source_line = reader.line();
      if (length_of_both(example) < untruncated_length) scan.truncated.push_back(reader.line());
      scan.tokens += static_cast<int64_t>(length_of_both(example));
      scan.targets +=
          count_targets(example) + (example.rejected ? count_targets(*example.rejected) : 0);
      scan.examples.push_back(std::move(example));
    } catch (const std::exception& e) {
      // The reader's own errors carry the location; tokenizer and template errors get it here:
      // the record caused them.
      const std::string what = e.what(), where = reader.where();
      if (reading && what.rfind(where + ": ", 0) != 0) throw;  // unreadable file, not a bad line
      scan.invalid.push_back(
          {reader.line(), what.rfind(where + ": ", 0) == 0 ? what : where + ": " + what});
    }
  }
  return scan;
}

std::optional<Format> preference_format_of(const std::string& path) {
  JsonlReader reader(path);
  nlohmann::json record;
  if (!reader.next(record)) return std::nullopt;
  const auto format = detect_format(record);
  return format && is_preference(*format) ? format : std::nullopt;
}

std::vector<Example> load_jsonl(const std::string& path, const text::Tokenizer& tokenizer,
                                const text::ChatTemplate* chat, const DatasetOptions& options) {
  DatasetScan scan = scan_jsonl(path, tokenizer, chat, options);
  if (!scan.invalid.empty()) {
    const size_t more = scan.invalid.size() - 1;
    throw std::runtime_error(scan.invalid.front().error +
                             (more > 0 ? " (and " + std::to_string(more) +
                                             " more invalid line(s); `kubetune-trainer preflight` "
                                             "lists them)"
                                       : ""));
  }
  if (scan.examples.empty()) throw std::runtime_error(path + ": no records");
  return std::move(scan.examples);
}

}  // namespace kubetune::data
