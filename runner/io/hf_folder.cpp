#include "runner/io/hf_folder.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/text.h"
#include "dsl/model_family.h"
#include "platform/files.h"
#include "runner/data/file_io.h"

namespace tailor::runner::io {
namespace fs = std::filesystem;
namespace {

bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

Result<ShardIndex> read_shard_index(const std::string& path) {
  // read_file: under tailord, only inside the spec root.
  TAILOR_ASSIGN_OR_RETURN(const std::string text, data::read_file(path));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument(path + ": not a valid JSON object");
  ShardIndex index;
  if (const auto m = j.find("metadata"); m != j.end() && !m->is_null()) {
    if (!m->is_object()) return Status::invalid_argument(path + ": metadata is not an object");
    if (const auto t = m->find("total_size"); t != m->end() && !t->is_null()) {
      // Some writers store total_size as a float (e.g. 1.2e10); accept whole values.
      if (!t->is_number() || t->get<double>() < 0) {
        return Status::invalid_argument(path + ": metadata.total_size is not a non-negative number");
      }
      index.total_size = t->is_number_integer() ? t->get<std::int64_t>() : static_cast<std::int64_t>(t->get<double>());
    }
  }
  const auto w = j.find("weight_map");
  if (w == j.end() || !w->is_object()) return Status::invalid_argument(path + ": missing object \"weight_map\"");
  for (const auto& [name, file] : w->items()) {
    if (!file.is_string()) {
      return Status::invalid_argument(path + ": weight_map." + name + " is not a string: " + file.dump());
    }
    const std::string f = file.get<std::string>();
    if (!is_plain_file_name(f)) {
      return Status::invalid_argument(path + ": weight_map." + name + ": " + quote(f) +
                                      " is not a file name in the model folder");
    }
    index.weight_map[name] = f;
  }
  if (index.weight_map.empty()) return Status::invalid_argument(path + ": weight_map is empty");
  return index;
}

Status write_shard_index(const std::string& path, const ShardIndex& index) {
  nlohmann::ordered_json j;
  j["metadata"] = {{"total_size", index.total_size}};
  j["weight_map"] = index.weight_map;
  return platform::write_file_atomic(path, j.dump(2) + "\n");
}

std::string shard_file_name(int shard, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", shard, count);
  return buf;
}

Result<WeightFiles> find_weight_files(const std::string& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return Status::not_found(folder + " is not a folder");
  for (const auto& [single_name, index_name] :
       {std::pair{kSingleWeightsFile, kShardIndexFile}, std::pair{kTorchWeightsFile, kTorchShardIndexFile}}) {
    WeightFiles out;
    const fs::path single = fs::path(folder) / single_name;
    if (fs::is_regular_file(single, ec)) {
      out.files.push_back(single.string());
      return out;
    }
    const fs::path index_path = fs::path(folder) / index_name;
    if (!fs::is_regular_file(index_path, ec)) continue;
    TAILOR_ASSIGN_OR_RETURN(ShardIndex index, read_shard_index(index_path.string()));
    std::set<std::string> shards;
    for (const auto& [name, file] : index.weight_map)
      shards.insert(file);
    for (const auto& file : shards) {
      const fs::path p = fs::path(folder) / file;
      if (!fs::is_regular_file(p, ec)) {
        return Status::invalid_argument(index_path.string() + " names shard " + file + ", which does not exist in " +
                                        folder);
      }
      out.files.push_back(p.string());
    }
    out.index = std::move(index);
    out.index_path = index_path.string();
    return out;
  }
  return Status::not_found("no weights in " + folder + " (" + kSingleWeightsFile + ", " + kShardIndexFile + ", " +
                           kTorchWeightsFile + " or " + kTorchShardIndexFile + ")");
}

Status write_hf_config(const std::string& path, const dsl::ModelArch& arch, std::string_view torch_dtype,
                       const dsl::SpecialTokenIds& ids, bool sequence_classifier) {
  return platform::write_file_atomic(path, dsl::hf_config_json(arch, torch_dtype, ids, sequence_classifier));
}

}  // namespace tailor::runner::io
