// The memory-saving mode's second half: the input each checkpointed decoder layer keeps for its
// backward waits in pinned host memory instead of on the GPU, as Unsloth's offloaded gradient
// checkpointing does. Copies run on a stream of their own, so they overlap the layers' compute:
// during forward each input leaves for the host while the next layers run; during backward the
// input of the layer below comes back while this one is recomputed.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace kubetune::model {

class HostOffload {
 public:
  // Holds the inputs of up to `layers` layers of one forward pass at a time.
  explicit HostOffload(int64_t layers)
      : slots_(static_cast<size_t>(layers)), blocks_(static_cast<size_t>(layers)) {}

  // Starts copying `x` (on a GPU) to the host as layer `layer`'s input. Its GPU memory can be
  // reused once the copy is done; the caller drops its reference whenever it likes.
  void store(int64_t layer, const at::Tensor& x);
  // Layer `layer`'s input back on its GPU, ready for work queued next on the current stream
  // (fetched now unless prefetch() brought it already), and its host copy released.
  at::Tensor take(int64_t layer);
  // Starts bringing layer `layer`'s input back, if it is stored and not on its way yet.
  void prefetch(int64_t layer);

 private:
  struct Slot {
    at::Tensor host;                  // pinned
    at::Tensor device;                // the copy back, once prefetched
    std::optional<c10::Event> ready;  // recorded on the copy stream after that copy
  };
  c10::Stream copy_stream(const at::Device& device);
  // Layer `layer`'s pinned host tensor of x's shape and dtype, in a block of exactly its size kept
  // from one step to the next. LibTorch's caching host allocator rounds every block up to a power
  // of two: at 311,296 tokens an 8B layer's 2.4 GiB input took 4 GiB, and 32 of them more than
  // the GPU machine's 125 GiB of host memory (the process was killed).
  at::Tensor pinned_like(int64_t layer, const at::Tensor& x);

  struct PinnedBlock;
  std::vector<Slot> slots_;
  std::vector<std::shared_ptr<PinnedBlock>> blocks_;
  std::optional<c10::Stream> copies_;
};

}  // namespace kubetune::model
