#include "trainer/device/out_of_memory.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

#ifdef KUBETUNE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace kubetune::train {
namespace {

// An environment variable as a number, or `otherwise` when unset or empty.
double env_number(const char* name, double otherwise) {
  const char* v = std::getenv(name);
  return v && *v ? std::stod(v) : otherwise;
}

// KUBETUNE_TEST_OOM_RANK, when set, names the one rank the test hooks act on.
bool hooks_act_on(int rank) {
  const double only_rank = env_number("KUBETUNE_TEST_OOM_RANK", -1);
  return only_rank < 0 || static_cast<int>(only_rank) == rank;
}

}  // namespace

void release_cached_memory(const torch::Device& device) {
#ifdef KUBETUNE_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

void apply_test_memory_cap(const torch::Device& device, int rank) {
  const double fraction = env_number("KUBETUNE_TEST_GPU_MEMORY_FRACTION", 0);
  if (fraction <= 0 || !hooks_act_on(rank)) return;
#ifdef KUBETUNE_WITH_CUDA
  if (device.is_cuda()) {
    // The caching allocator is set up by its first allocation; the cap applies from before the
    // model loads, which may be before anything was allocated.
    (void)torch::empty({1}, torch::TensorOptions().device(device));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
  }
#else
  (void)device;
#endif
}

void inject_test_out_of_memory(int64_t examples, int rank) {
  const double above = env_number("KUBETUNE_TEST_OOM_ABOVE_EXAMPLES", -1);
  if (above < 0 || static_cast<double>(examples) <= above || !hooks_act_on(rank)) return;
  TORCH_CHECK_WITH(OutOfMemoryError, false,
                   "injected by KUBETUNE_TEST_OOM_ABOVE_EXAMPLES: ", examples,
                   " examples in one forward on rank ", rank);
}

}  // namespace kubetune::train
