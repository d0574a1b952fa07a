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
#include <optional>
#include <vector>

namespace kubetune::model {

class HostOffload {
 public:
  // Holds the inputs of up to `layers` layers of one forward pass at a time.
  explicit HostOffload(int64_t layers) : slots_(static_cast<size_t>(layers)) {}

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

  std::vector<Slot> slots_;
  std::optional<c10::Stream> copies_;
};

}  // namespace kubetune::model
