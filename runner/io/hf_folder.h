// The files of a Hugging Face model folder, torch-free: where its weights
// are (one model.safetensors, or model.safetensors.index.json and its
// shards; else, as older transformers saved them, pytorch_model.bin or
// pytorch_model.bin.index.json and its shards), the shard index itself, and
// config.json written from a ModelArch. Not here: reading the weights
// (runner/torch/weight_file.h), tokenizer files.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "dsl/model_family.h"

namespace tailor::runner::io {

inline constexpr const char* kSingleWeightsFile = "model.safetensors";
inline constexpr const char* kShardIndexFile = "model.safetensors.index.json";
// torch.save's format (runner/torch/torch_save_file.h), read when a folder
// has no safetensors weights.
inline constexpr const char* kTorchWeightsFile = "pytorch_model.bin";
inline constexpr const char* kTorchShardIndexFile = "pytorch_model.bin.index.json";
inline constexpr const char* kConfigFile = "config.json";

// model.safetensors.index.json (and pytorch_model.bin.index.json):
//   {"metadata": {"total_size": N}, "weight_map": {"tensor name": "shard file name"}}
struct ShardIndex {
  std::int64_t total_size = 0;                    // bytes of all tensors' data (metadata.total_size; 0 if absent)
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name (a plain name in the same folder)
};

// Reads and validates an index: weight_map must be an object of strings,
// each a plain file name (no folder part, not "." or ".."); total_size, when
// present, a non-negative integer. Errors name the file and the key.
Result<ShardIndex> read_shard_index(const std::string& path);

// Writes the index atomically (path + ".tmp", then rename).
Status write_shard_index(const std::string& path, const ShardIndex& index);

// "model-00002-of-00003.safetensors" for shard 2 of 3 (1-based, as Hugging
// Face names them).
std::string shard_file_name(int shard, int count);

// A folder's weight files.
struct WeightFiles {
  std::vector<std::string> files;  // full paths: the single file, or the index's shards in name order
  std::optional<ShardIndex> index; // set for a sharded folder
  std::string index_path;          // the index's full path when sharded
};

// In transformers' order of preference: model.safetensors, the safetensors
// index and its shards, pytorch_model.bin, the pytorch_model.bin index and
// its shards. Errors: NotFound when the folder has none of them;
// InvalidArgument for a bad index or one naming a shard that does not exist.
Result<WeightFiles> find_weight_files(const std::string& folder);

// Writes dsl::hf_config_json(arch, torch_dtype) (dsl/model_family.h), which
// the DSL's config.json reader reads back as `arch`, to `path` atomically.
Status write_hf_config(const std::string& path, const dsl::ModelArch& arch, std::string_view torch_dtype,
                       const dsl::SpecialTokenIds& ids = {}, bool sequence_classifier = false);

}  // namespace tailor::runner::io
