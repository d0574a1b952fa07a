#pragma once
// Datasets as published, read as the record formats the encoder knows (dataset.h), before anything
// else looks at a record:
//   - data.columns: a dataset's own column names for our fields ({"prompt": "question"} reads each
//     record's "question" as its "prompt");
//   - data.format sharegpt: {"conversations": [{"from": "human", "value": "..."}, ...]} as
//     {"messages": [{"role": "user", "content": "..."}, ...]}: TRL's maybe_convert_to_chatml (from
//     and value to role and content, conversations to messages) with the role names of Unsloth's
//     standardize_sharegpt (human, user, input: user; gpt, assistant, output: assistant; system);
//   - data.format alpaca: {"instruction", "input", "output"} as a conversational prompt and
//     completion: the user's message is the instruction, then a blank line and the input when it is
//     not empty; the assistant's is the output (trained on alone, as any completion).

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/finetunejob_types.h"
#include "trainer/data/dataset.h"

namespace kubetune::data {

class ColumnMapping {
 public:
  ColumnMapping(Format format, const api::DataColumns& columns);

  // The record in the format format() names; throws std::runtime_error naming the column (and the
  // data.columns field) that is missing, or the message that cannot be read. The caller adds
  // "path:LINE: ".
  nlohmann::json apply(nlohmann::json record) const;
  // The format mapped records are in: messages for sharegpt, prompt_completion for alpaca, else
  // the requested one.
  Format format() const;
  // What the mapping does, for the preflight's report; empty when it does nothing.
  std::string describe() const;

 private:
  Format requested_;
  std::vector<std::pair<std::string, std::string>> renames_;  // (field, column)
};

}  // namespace kubetune::data
