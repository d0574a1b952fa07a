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

// Before anything is written: refuses an s3:// output.dir or checkpoint.dir (the trainer writes a
// local folder, which kubetune run and the operator give it and then upload), and rank 0 (`lead`)
// removes the completion marker an earlier run left, so that the folder is not whole until this
// run says so.
void begin_outputs(const TrainConfig& c, bool lead);
// Rank 0, last of all: common/contracts.h's kOutputCompleteFile in output.dir, naming this host
// and the final step; the publish container beside the trainer waits for it.
void mark_outputs_complete(const Run& run);

}  // namespace kubetune::train
