// The bytes a layer keeps per token per hidden unit, as the memory model
// counts them and as saved_activations_reference.py measures them on a
// stack's own modules: 3 layers less 2, 256 tokens less 128, so terms that
// do not grow with layers or tokens drop out.
#pragma once

#include <cstdint>

#include "strategies/memory_model.h"

namespace tailor::strategies {

// `input` is the block's MemoryInput but for its arch's layer count and its
// batch, which this sets (one row of each length).
inline double layer_bytes_per_token_per_hidden(dsl::ModelArch arch, MemoryInput input) {
  input.arch = &arch;
  auto activations = [&](std::int64_t layers, std::int64_t tokens) {
    arch.layers = layers;
    input.batch = {1, tokens};
    return static_cast<double>(estimate_memory(input).per_device.activations.count());
  };
  auto layer = [&](std::int64_t tokens) { return activations(3, tokens) - activations(2, tokens); };
  return (layer(256) - layer(128)) / (128.0 * static_cast<double>(arch.hidden));
}

}  // namespace tailor::strategies
