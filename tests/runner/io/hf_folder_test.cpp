// Hugging Face model folders without torch: config.json written from a
// ModelArch and read back by the DSL, the shard index, and finding a
// folder's weight files.
#include "runner/io/hf_folder.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsl/model_family.h"
#include "dsl/spec_loader.h"
#include "runner/io/safetensors.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"
#include "tests/testing/tokenizer_json.h"

namespace tailor::runner::io {
namespace {

using tailor::testing::read_text;

namespace fs = std::filesystem;
using tailor::testing::TempDir;

// The architecture the DSL resolves for a spec whose model.path is `folder`.
dsl::ModelArch read_back(const TempDir& dir, const std::string& folder) {
  const std::string train = dir.write("train.txt", "hello\n");
  dir.write(folder + "/tokenizer.json", tailor::testing::byte_level_tokenizer_json());
  const auto loaded = dsl::load_job_spec_text("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {path: " +
                                                  dir.file(folder) + "}\ndata: {train: " + train + "}\n",
                                              "job.yaml", dir.path().string());
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  return loaded.ok() ? loaded.spec->model.arch : dsl::ModelArch{};
}

void expect_same(const dsl::ModelArch& a, const dsl::ModelArch& b) {
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.intermediate, b.intermediate);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
}

dsl::ModelArch arch(dsl::ModelFamily family) {
  dsl::ModelArch a;
  a.family = family;
  a.layers = 3;
  a.hidden = 96;
  a.intermediate = 200;
  a.heads = 6;
  a.kv_heads = family == dsl::ModelFamily::kGpt2 ? 6 : 2;
  a.vocab = 321;
  a.max_seq_len = 777;
  a.rope_theta = family == dsl::ModelFamily::kGpt2 ? 10000.0 : 1234567.5;
  a.norm_eps = 3.3e-6;
  a.tie_embeddings = family == dsl::ModelFamily::kQwen2;
  return a;
}

TEST(HfFolderTest, WrittenConfigReadsBackThroughTheDslToTheSameArch) {
  for (auto family : {dsl::ModelFamily::kLlama, dsl::ModelFamily::kMistral, dsl::ModelFamily::kQwen2,
                      dsl::ModelFamily::kGpt2}) {
    SCOPED_TRACE(static_cast<int>(family));
    TempDir dir;
    const dsl::ModelArch a = arch(family);
    fs::create_directories(dir.path() / "m");
    ASSERT_TRUE(write_hf_config(dir.file("m/config.json"), a, "bfloat16").is_ok());
    expect_same(read_back(dir, "m"), a);
    EXPECT_FALSE(fs::exists(dir.file("m/config.json.tmp")));
  }
}

TEST(HfFolderTest, ConfigNamesTheTransformersClassAndKeys) {
  const auto llama = nlohmann::json::parse(dsl::hf_config_json(arch(dsl::ModelFamily::kLlama), "float32"));
  EXPECT_EQ(llama["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(llama["model_type"], "llama");
  EXPECT_EQ(llama["num_key_value_heads"], 2);
  EXPECT_EQ(llama["torch_dtype"], "float32");
  EXPECT_EQ(llama["tie_word_embeddings"], false);
  const auto mistral = nlohmann::json::parse(dsl::hf_config_json(arch(dsl::ModelFamily::kMistral), "bfloat16"));
  EXPECT_EQ(mistral["architectures"], nlohmann::json::array({"MistralForCausalLM"}));
  EXPECT_TRUE(mistral["sliding_window"].is_null());
  const auto qwen = nlohmann::json::parse(dsl::hf_config_json(arch(dsl::ModelFamily::kQwen2), "bfloat16"));
  EXPECT_EQ(qwen["architectures"], nlohmann::json::array({"Qwen2ForCausalLM"}));
  const auto gpt2 = nlohmann::json::parse(dsl::hf_config_json(arch(dsl::ModelFamily::kGpt2), "float16"));
  EXPECT_EQ(gpt2["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(gpt2["n_embd"], 96);
  EXPECT_EQ(gpt2["n_inner"], 200);
  EXPECT_EQ(gpt2["n_positions"], 777);
  EXPECT_FALSE(gpt2.contains("hidden_size"));
}

TEST(HfFolderTest, ShardNamesFollowTransformers) {
  EXPECT_EQ(shard_file_name(1, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(shard_file_name(12, 120), "model-00012-of-00120.safetensors");
}

TEST(HfFolderTest, ShardIndexRoundTrips) {
  TempDir dir;
  ShardIndex index;
  index.total_size = 123456789012;
  index.weight_map = {{"a.weight", shard_file_name(1, 2)}, {"b.weight", shard_file_name(2, 2)}};
  const std::string path = dir.file(kShardIndexFile);
  ASSERT_TRUE(write_shard_index(path, index).is_ok());
  const auto j = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(j["metadata"]["total_size"], 123456789012);
  EXPECT_EQ(j["weight_map"]["b.weight"], "model-00002-of-00002.safetensors");
  auto back = read_shard_index(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->total_size, index.total_size);
  EXPECT_EQ(back->weight_map, index.weight_map);
}

TEST(HfFolderTest, BadIndexesAreRefusedNamingFileAndKey) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1]", "not a valid JSON object"},
      {R"({"metadata": {}})", "missing object \"weight_map\""},
      {R"({"weight_map": {}})", "weight_map is empty"},
      {R"({"weight_map": {"a": 3}})", "weight_map.a is not a string"},
      {R"({"weight_map": {"a": "../evil.safetensors"}})", "weight_map.a: \"../evil.safetensors\" is not a file name"},
      {R"({"metadata": {"total_size": "big"}, "weight_map": {"a": "x"}})", "metadata.total_size"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string path = dir.write(kShardIndexFile, text);
    auto r = read_shard_index(path);
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status().message();
  }
}

TEST(HfFolderTest, FindsASingleFileOrTheIndexAndItsShards) {
  TempDir dir;
  const std::vector<float> one{1};
  const auto data = std::as_bytes(std::span<const float>(one));
  // Sharded: two shards listed by the index.
  fs::create_directories(dir.path() / "sharded");
  ASSERT_TRUE(write_safetensors(dir.file("sharded/" + shard_file_name(2, 2)), {{"b", DType::kF32, {1}, data}}).is_ok());
  ASSERT_TRUE(write_safetensors(dir.file("sharded/" + shard_file_name(1, 2)), {{"a", DType::kF32, {1}, data}}).is_ok());
  ShardIndex index;
  index.weight_map = {{"a", shard_file_name(1, 2)}, {"b", shard_file_name(2, 2)}};
  ASSERT_TRUE(write_shard_index(dir.file(std::string("sharded/") + kShardIndexFile), index).is_ok());
  auto sharded = find_weight_files(dir.file("sharded"));
  ASSERT_TRUE(sharded.is_ok()) << sharded.status().to_string();
  ASSERT_EQ(sharded->files.size(), 2u);
  EXPECT_EQ(fs::path(sharded->files[0]).filename(), shard_file_name(1, 2));
  EXPECT_EQ(fs::path(sharded->files[1]).filename(), shard_file_name(2, 2));
  ASSERT_TRUE(sharded->index.has_value());
  EXPECT_EQ(sharded->index->weight_map, index.weight_map);

  // Single file.
  fs::create_directories(dir.path() / "single");
  ASSERT_TRUE(write_safetensors(dir.file("single/model.safetensors"), {{"a", DType::kF32, {1}, data}}).is_ok());
  auto single = find_weight_files(dir.file("single"));
  ASSERT_TRUE(single.is_ok()) << single.status().to_string();
  ASSERT_EQ(single->files.size(), 1u);
  EXPECT_EQ(fs::path(single->files[0]).filename(), "model.safetensors");
  EXPECT_FALSE(single->index.has_value());
}

TEST(HfFolderTest, AnIndexNamingAMissingShardIsAnError) {
  TempDir dir;
  ShardIndex index;
  index.weight_map = {{"a", shard_file_name(1, 2)}};
  ASSERT_TRUE(write_shard_index(dir.file(kShardIndexFile), index).is_ok());
  auto r = find_weight_files(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("names shard model-00001-of-00002.safetensors, which does not exist"),
            std::string::npos)
      << r.status().message();
}

TEST(HfFolderTest, AFolderWithoutWeightsSaysWhatIsMissing) {
  TempDir dir;
  dir.write("config.json", "{}");
  auto r = find_weight_files(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no weights in " + dir.path().string() +
                                      " (model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                                      "pytorch_model.bin.index.json)"),
            std::string::npos)
      << r.status().message();
}

// transformers' order: safetensors before pytorch_model.bin, one file before
// an index; the .bin index is read as the safetensors one.
TEST(HfFolderTest, SafetensorsComeFirstThenPytorchModelBin) {
  TempDir dir;
  ShardIndex index;
  index.weight_map = {{"a", "pytorch_model-00001-of-00002.bin"}, {"b", "pytorch_model-00002-of-00002.bin"}};
  ASSERT_TRUE(write_shard_index(dir.file(kTorchShardIndexFile), index).is_ok());
  dir.write("pytorch_model-00001-of-00002.bin", "");
  dir.write("pytorch_model-00002-of-00002.bin", "");
  auto r = find_weight_files(dir.path().string());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->files, (std::vector<std::string>{dir.file("pytorch_model-00001-of-00002.bin"),
                                                dir.file("pytorch_model-00002-of-00002.bin")}));
  EXPECT_EQ(r->index_path, dir.file(kTorchShardIndexFile));
  ASSERT_TRUE(r->index.has_value());
  EXPECT_EQ(r->index->weight_map, index.weight_map);

  dir.write(kTorchWeightsFile, "");
  r = find_weight_files(dir.path().string());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->files, std::vector<std::string>{dir.file(kTorchWeightsFile)});
  EXPECT_FALSE(r->index.has_value());

  index.weight_map = {{"a", shard_file_name(1, 1)}};
  ASSERT_TRUE(write_shard_index(dir.file(kShardIndexFile), index).is_ok());
  dir.write(shard_file_name(1, 1), "");
  r = find_weight_files(dir.path().string());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->files, std::vector<std::string>{dir.file(shard_file_name(1, 1))});
  EXPECT_EQ(r->index_path, dir.file(kShardIndexFile));

  dir.write(kSingleWeightsFile, "");
  r = find_weight_files(dir.path().string());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->files, std::vector<std::string>{dir.file(kSingleWeightsFile)});
}

}  // namespace
}  // namespace tailor::runner::io
