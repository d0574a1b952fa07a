// kubetune-trainer: the training binary in every pod.
//   train     --config FILE                 fine-tune (LoRA or full) from a YAML/JSON config
//   eval      --model DIR [--adapter DIR] --data FILE.jsonl [--json]
//   tokenize  --tokenizer DIR [--chat] [--json]   (JSONL on stdin)
//   launch    --nproc-per-node N|auto ... -- train --config FILE
//   init-model --config config.json --tokenizer DIR --out DIR   (random weights, for demos/tests)
#include "trainer/commands.h"

int main(int argc, char** argv) { return kubetune::run_cli(argc, argv); }
