// Training checkpoints: DIR/step-000100/ holding the parameters, the
// optimizer state, and state.json (step, data position, loss scale, RNG).
// Written into a temporary folder and renamed, so a folder named step-N is
// always complete; the newest `keep` are kept.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::runner {

struct CheckpointState {
  std::int64_t step = 0;
  std::int64_t data_epoch = 0;
  std::int64_t data_index = 0;
  double loss_scale = 1.0;
  std::int64_t good_steps = 0;  // fp16: steps since the loss scale last changed
  std::int64_t tokens_seen = 0;
};

struct CheckpointTensors {
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> optimizer;  // undefined entries allowed
  torch::Tensor rng_state;         // the CPU generator's
  torch::Tensor device_rng_state;  // the training GPU's generator's; undefined on the CPU
};

// Saves step `state.step` under `dir` and prunes to the newest `keep`.
// Tensors are written as CPU tensors, so a checkpoint resumes on any device.
Status save_checkpoint(const std::string& dir, const CheckpointState& state, const CheckpointTensors& tensors,
                       std::int64_t keep);

// The newest complete checkpoint folder under `dir`, if any.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// Loads a checkpoint folder; a missing or corrupt file is an error naming it.
Result<std::pair<CheckpointState, CheckpointTensors>> load_checkpoint(const std::string& folder);

}  // namespace tailor::runner
