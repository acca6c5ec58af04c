// Training checkpoints: DIR/step-000100/ holding the parameters, the
// optimizer state, and state.json (step, data position, loss scale, RNG).
// Written into a temporary folder and renamed, so a folder named step-N is
// always complete; the newest `keep` are kept.
//
// One rank writes model.pt and optimizer.pt. Sharded ranks (ZeRO) each
// write their own file, rank-00001-of-00004.safetensors, holding the flat
// element ranges of the tensors they keep (ShardPiece), and nothing is
// gathered: rank 0 commits the folder once every rank has written. Loading
// assembles either layout into the one-rank layout (whole tensors, in the
// same order), so a checkpoint resumes on any rank count and stage.
//
// state.json lists every file of the folder with its size and checksum
// (data/hash.h's checksum64), and loading verifies them: a file truncated,
// overwritten or missing makes the checkpoint damaged (DataLoss), and the
// trainer resumes from the newest checkpoint that is not.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::runner {

struct CheckpointState {
  // Adapter runs (LoRA, QLoRA) checkpoint only what trains: the params are
  // the trainable tensors, and the frozen base is named by its fingerprint
  // (base_fingerprint below), which resume checks against the base it
  // builds. Empty: the params are every parameter of the model.
  std::vector<double> base_fingerprint;
  std::int64_t step = 0;
  std::int64_t data_epoch = 0;
  std::int64_t data_index = 0;
  // Where the data stands, for people and for checks: what the batcher
  // reads (Run::Data::identity; empty in checkpoints older than it), and
  // the dataset (data.train's index), its example and the token that the
  // next row starts at.
  std::string data_identity;
  std::int64_t data_dataset = 0, data_example = 0, data_token = 0;
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

// Elements [begin, begin + data.numel()) of the row-major tensor `name`
// of shape `shape`: "model.<i>" (the i-th parameter) or "optimizer.<j>"
// (the j-th of the one-rank optimizer state's tensors).
struct ShardPiece {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0;
  torch::Tensor data;  // flat or not, any device: its elements in order
};

// What a sharded checkpoint's ranks wrote: the one-rank layout's sizes.
struct ShardLayout {
  int ranks = 1;
  std::int64_t model_tensors = 0, optimizer_tensors = 0;
};

// What names a frozen base: per tensor, the sum and the sum of squares of
// its elements in fp64 (summed in chunks, so no fp64 copy of a tensor is
// ever whole). Not a cryptographic hash: it tells another base (another
// folder, a changed file, another precision) from the one a checkpoint was
// trained over, which is what resuming an adapter needs.
std::vector<double> weights_fingerprint(const std::vector<torch::Tensor>& tensors);
// OK when `found` is `expected` (relative difference at most 1e-9: the same
// weights summed on another device); else FailedPrecondition naming the
// first tensor that differs (`names[i]`) and the checkpoint folder.
Status check_fingerprint(const std::vector<double>& expected, const std::vector<double>& found,
                         const std::vector<std::string>& names, const std::string& folder);

// A file of a checkpoint folder as written: what loading verifies.
struct FileSum {
  std::string name;  // in the folder
  std::int64_t bytes = 0;
  std::uint64_t checksum = 0;
};
Result<FileSum> sum_file(const std::string& folder, const std::string& name);
// rank-00001-of-00004.safetensors: rank `rank`'s file of a sharded checkpoint.
std::string checkpoint_shard_name(int rank, int ranks);

// A sharded save across ranks: rank 0 begins (a fresh DIR/step-N.tmp) and
// then every rank writes its pieces into it; once all have, rank 0 commits
// (state, RNG, the rename, pruning) or, when any failed, abandons it.
// commit_checkpoint's `layout`: the shards written, nullptr for model.pt
// and optimizer.pt.
Result<std::string> begin_checkpoint(const std::string& dir, std::int64_t step);
std::string checkpoint_tmp_path(const std::string& dir, std::int64_t step);  // what begin_checkpoint returns
// Returns the file's sum, read back from the file, for rank 0 to record.
Result<FileSum> write_checkpoint_shard(const std::string& tmp, int rank, int ranks,
                                       const std::vector<ShardPiece>& pieces);
// `shards`: the ranks' files' sums; the files rank 0 writes it sums itself.
Status commit_checkpoint(const std::string& dir, const std::string& tmp, const CheckpointState& state,
                         const CheckpointTensors& rng, const ShardLayout* layout, const std::vector<FileSum>& shards,
                         std::int64_t keep);
void abandon_checkpoint(const std::string& tmp);

// Saves step `state.step` under `dir` and prunes to the newest `keep`.
// Tensors are written as CPU tensors, so a checkpoint resumes on any device.
Status save_checkpoint(const std::string& dir, const CheckpointState& state, const CheckpointTensors& tensors,
                       std::int64_t keep);

// The newest complete checkpoint folder under `dir`, if any, and all of
// them, newest first.
std::optional<std::string> latest_checkpoint(const std::string& dir);
std::vector<std::string> checkpoints_newest_first(const std::string& dir);

// Moves a damaged checkpoint folder aside (DIR/damaged-step-N), so that it
// is neither resumed nor counted among the newest `keep`; its name, or an
// IOError.
Result<std::string> set_aside_checkpoint(const std::string& folder);

// Loads a checkpoint folder; a missing or corrupt file is an error naming
// it: DataLoss when the file does not match its recorded size or checksum,
// InvalidArgument when it cannot be read.
Result<std::pair<CheckpointState, CheckpointTensors>> load_checkpoint(const std::string& folder);

}  // namespace tailor::runner
