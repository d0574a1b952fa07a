// Helpers shared by the model/io tests: where the fixtures are and how to compare tensors.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "trainer/io/hf_checkpoint.h"
#include "trainer/io/safetensors.h"
#include "trainer/model/llama.h"

namespace kubetune::testing {

// Written by make_fixtures.py; the path comes from CMake through KUBETUNE_MODEL_FIXTURES.
inline std::string fixture_dir() {
  const char* dir = std::getenv("KUBETUNE_MODEL_FIXTURES");
  if (dir == nullptr) throw std::runtime_error("KUBETUNE_MODEL_FIXTURES is not set");
  return dir;
}
inline std::string fixture(const std::string& name) { return fixture_dir() + "/" + name; }

// Where the tests write what the Python checks read back (and scratch folders).
inline std::string output_dir(const std::string& name) {
  std::string dir = fixture_dir() + "/ours/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// max|a-b| / max|b|: the relative error the parity goal is stated in.
inline double rel_err(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.detach().cpu().to(at::kDouble), y = b.detach().cpu().to(at::kDouble);
  EXPECT_EQ(x.sizes(), y.sizes());
  if (x.sizes() != y.sizes()) return 1e9;
  double scale = std::max(y.abs().max().item<double>(), 1e-12);
  return (x - y).abs().max().item<double>() / scale;
}

inline model::CausalLM load_model(const std::string& dir) {
  model::CausalLM m(model::ModelConfig::from_dir(dir));
  io::load_hf_weights(m, dir);
  return m;
}

}  // namespace kubetune::testing
