// The typed handle of one of our registered ops (TORCH_LIBRARY kubetune::*), for the autograd
// wrappers that call them: dispatched to the CPU or CUDA implementation by the inputs' device.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace kubetune::kernels {

template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace kubetune::kernels
