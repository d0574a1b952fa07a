// What a run leaves behind and reads back mid-run: resume points (checkpoints), the evaluation on
// the validation set, and the final adapter or model folder. Each is a collective where weights
// are sharded: every rank calls it, rank 0 writes.
#pragma once

#include "trainer/loop/run.h"

namespace kubetune::train {

// Writes a resume point of the run as it stands (rank 0), pruned to checkpoint.keepLast.
void write_checkpoint(Run& run);
// The mean validation loss over all ranks.
double run_validation(Run& run);
// The PEFT adapter (and, asked for, the merged model) or the full model folder, with the
// tokenizer files.
void save_outputs(Run& run);

}  // namespace kubetune::train
