// Running out of GPU memory in a step as something a run recovers from (trainer/loop/step.cpp: the
// step is re-run at a smaller micro-batch with the same global batch), and the two test hooks that
// make it happen on purpose, on a CPU (an injected allocation failure) and on a GPU (a memory cap).
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace kubetune::train {

// Hands the caching allocator's free blocks back to the GPU, so that the smaller re-run does not
// meet the failed attempt's fragments.
void release_cached_memory(const torch::Device& device);

// KUBETUNE_TEST_GPU_MEMORY_FRACTION=f: the caching allocator may hold at most f of the GPU's
// memory (torch.cuda.set_per_process_memory_fraction), so a test can make a real step run out;
// with KUBETUNE_TEST_OOM_RANK=r only on rank r.
void apply_test_memory_cap(const torch::Device& device, int rank);

// KUBETUNE_TEST_OOM_ABOVE_EXAMPLES=n (and KUBETUNE_TEST_OOM_RANK=r, else every rank): a forward
// of more than n examples throws c10::OutOfMemoryError, the error the CUDA allocator throws.
// Unset, nothing happens.
void inject_test_out_of_memory(int64_t examples, int rank);

}  // namespace kubetune::train
