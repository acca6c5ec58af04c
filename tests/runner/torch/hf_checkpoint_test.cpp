// Hugging Face checkpoints of CausalLM on tiny models: save/load round
// trips per family, dtypes, shards, hand-edited files for the name mapping
// and every load error, and a training run that starts from a model folder.
#include "runner/torch/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "dsl/spec_loader.h"
#include "runner/data/batcher.h"
#include "runner/data/bpe_tokenizer.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/token_cache.h"
#include "runner/data/tokenizer.h"
#include "runner/io/hf_folder.h"
#include "runner/io/safetensors.h"
#include "runner/torch/checkpoint.h"
#include "runner/torch/cross_entropy.h"
#include "runner/torch/trainer.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tokenizer_json.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using tailor::testing::TempDir;

dsl::ModelArch tiny(dsl::ModelFamily family, bool tied) {
  dsl::ModelArch a;
  a.family = family;
  a.layers = 2;
  a.hidden = 32;
  a.intermediate = 48;
  a.heads = 4;
  a.kv_heads = family == dsl::ModelFamily::kGpt2 ? 4 : 2;
  a.vocab = 50;
  a.max_seq_len = 16;
  a.tie_embeddings = tied;
  a.rope_theta = 10000.0;
  a.norm_eps = 1e-5;
  return a;
}

// Every parameter random (norms and biases included, which the model's own
// initialisation leaves at 1 and 0), so a mix-up of any two shows.
CausalLM random_model(const dsl::ModelArch& a, std::uint64_t seed, torch::Dtype dtype = torch::kFloat32) {
  torch::manual_seed(seed);
  CausalLM m(a, 0);
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.normal_(0, 0.5);
  m->to(dtype);
  return m;
}

torch::Tensor logits_of(CausalLM& m) {
  torch::NoGradGuard no_grad;
  m->eval();
  ModelInput in;
  in.input_ids = (torch::arange(12, torch::kInt64) * 7 % m->arch().vocab).unsqueeze(0);
  in.positions = torch::arange(12, torch::kInt64).unsqueeze(0);
  return m->logits(m->hidden_states(in));
}

void expect_identical(CausalLM& a, CausalLM& b) {
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    const torch::Tensor* other = pb.find(item.key());
    ASSERT_NE(other, nullptr) << item.key();
    EXPECT_EQ(item.value().scalar_type(), other->scalar_type()) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), *other)) << item.key();
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Rewrites a safetensors file through `edit`, which may drop, add or change
// entries; `keep` holds the bytes of added tensors alive.
void rewrite(const std::string& path, const std::function<void(std::vector<io::TensorToWrite>&)>& edit) {
  auto f = io::SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  std::vector<io::TensorToWrite> tensors;
  for (const auto& t : f->tensors()) tensors.push_back({t.name, t.dtype, t.shape, t.data});
  edit(tensors);
  ASSERT_TRUE(io::write_safetensors(path, tensors, f->metadata()).is_ok());
}

std::vector<std::string> folder_files(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Family {
  const char* label;
  dsl::ModelArch arch;
};

TEST(HfCheckpointTest, SaveThenLoadIsBitIdenticalWithIdenticalLogits) {
  const std::vector<Family> families = {
      {"llama gqa", tiny(dsl::ModelFamily::kLlama, false)},
      {"qwen2 tied", tiny(dsl::ModelFamily::kQwen2, true)},
      {"mistral", tiny(dsl::ModelFamily::kMistral, false)},
      {"gpt2 tied", tiny(dsl::ModelFamily::kGpt2, true)},
      {"gpt2 untied", tiny(dsl::ModelFamily::kGpt2, false)},
  };
  for (const Family& f : families) {
    SCOPED_TRACE(f.label);
    TempDir dir;
    CausalLM a = random_model(f.arch, 1), b = random_model(f.arch, 2);
    ASSERT_FALSE(torch::equal(logits_of(a), logits_of(b)));
    ASSERT_TRUE(save_hf_model(a, dir.file("hf"), kDefaultMaxShardBytes).is_ok());
    EXPECT_EQ(folder_files(dir.file("hf")), (std::vector<std::string>{"config.json", "model.safetensors"}));
    const Status s = load_hf_weights(b, dir.file("hf"));
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    expect_identical(a, b);
    EXPECT_TRUE(torch::equal(logits_of(a), logits_of(b)));
  }
}

TEST(HfCheckpointTest, FilesUseHuggingFaceNamesShapesAndMetadata) {
  TempDir dir;
  CausalLM llama = random_model(tiny(dsl::ModelFamily::kQwen2, false), 3);
  ASSERT_TRUE(save_hf_model(llama, dir.file("q"), 0).is_ok());
  auto f = io::SafetensorsFile::open(dir.file("q/model.safetensors"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->metadata().at("format"), "pt");  // transformers refuses files without it
  // 1 embedding + 2 layers x (2 norms, q/k/v weights and biases, o, gate, up, down) + final norm + head.
  EXPECT_EQ(f->tensors().size(), 1u + 2u * 12u + 1u + 1u);
  const io::TensorView* k = f->find("model.layers.1.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<std::int64_t>{16, 32}));  // kv_heads 2 x head_dim 8
  EXPECT_EQ(k->dtype, io::DType::kF32);
  // k_proj is rows [32, 48) of the fused qkv.
  const torch::Tensor qkv = llama->named_parameters()["layer1.qkv"];
  const torch::Tensor stored = torch::from_blob(const_cast<std::byte*>(k->data.data()), {16, 32}, torch::kFloat32);
  EXPECT_TRUE(torch::equal(stored, qkv.narrow(0, 32, 16)));
  EXPECT_NE(f->find("model.layers.0.self_attn.v_proj.bias"), nullptr);
  EXPECT_NE(f->find("lm_head.weight"), nullptr);
  const auto config = nlohmann::json::parse(read_all(dir.file("q/config.json")));
  EXPECT_EQ(config["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(config["torch_dtype"], "float32");

  // GPT-2: "transformer." names, Conv1D weights stored (in, out).
  CausalLM gpt2 = random_model(tiny(dsl::ModelFamily::kGpt2, true), 4);
  ASSERT_TRUE(save_hf_model(gpt2, dir.file("g"), 0).is_ok());
  auto g = io::SafetensorsFile::open(dir.file("g/model.safetensors"));
  ASSERT_TRUE(g.is_ok());
  const io::TensorView* fc = g->find("transformer.h.1.mlp.c_fc.weight");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->shape, (std::vector<std::int64_t>{32, 48}));
  const torch::Tensor fc_stored = torch::from_blob(const_cast<std::byte*>(fc->data.data()), {32, 48}, torch::kFloat32);
  EXPECT_TRUE(torch::equal(fc_stored, gpt2->named_parameters()["layer1.fc"].t()));
  EXPECT_EQ(g->find("lm_head.weight"), nullptr);  // tied
}

TEST(HfCheckpointTest, Bf16IsSavedAsBf16AndConvertsOnLoad) {
  TempDir dir;
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, false);
  CausalLM a = random_model(arch, 5, torch::kBFloat16);
  ASSERT_TRUE(save_hf_model(a, dir.file("hf"), 0).is_ok());
  auto f = io::SafetensorsFile::open(dir.file("hf/model.safetensors"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->find("model.embed_tokens.weight")->dtype, io::DType::kBF16);
  EXPECT_EQ(nlohmann::json::parse(read_all(dir.file("hf/config.json")))["torch_dtype"], "bfloat16");
  CausalLM same = random_model(arch, 6, torch::kBFloat16);
  ASSERT_TRUE(load_hf_weights(same, dir.file("hf")).is_ok());
  expect_identical(a, same);
  CausalLM wide = random_model(arch, 6, torch::kFloat32);
  ASSERT_TRUE(load_hf_weights(wide, dir.file("hf")).is_ok());
  for (const auto& item : a->named_parameters()) {
    const torch::Tensor w = wide->named_parameters()[item.key()];
    EXPECT_EQ(w.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(w, item.value().to(torch::kFloat32))) << item.key();
  }
}

TEST(HfCheckpointTest, SmallShardLimitWritesShardsAndAnIndexThatLoadBack) {
  TempDir dir;
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, false);
  CausalLM a = random_model(arch, 7);
  const std::int64_t limit = 8192;
  ASSERT_TRUE(save_hf_model(a, dir.file("hf"), limit).is_ok());
  const auto files = folder_files(dir.file("hf"));
  EXPECT_EQ(std::count(files.begin(), files.end(), "model.safetensors"), 0);
  EXPECT_EQ(std::count(files.begin(), files.end(), "model.safetensors.index.json"), 1);
  auto index = io::read_shard_index(dir.file("hf/model.safetensors.index.json"));
  ASSERT_TRUE(index.is_ok()) << index.status().to_string();
  std::set<std::string> shards;
  for (const auto& [name, file] : index->weight_map) shards.insert(file);
  ASSERT_GE(shards.size(), 3u);
  const int n = static_cast<int>(shards.size());
  std::int64_t total = 0;
  std::size_t tensors = 0;
  for (int i = 1; i <= n; ++i) {
    const std::string name = io::shard_file_name(i, n);
    ASSERT_TRUE(shards.contains(name)) << name;
    auto f = io::SafetensorsFile::open(dir.file("hf/" + name));
    ASSERT_TRUE(f.is_ok());
    std::int64_t bytes = 0;
    for (const auto& t : f->tensors()) {
      bytes += static_cast<std::int64_t>(t.data.size());
      EXPECT_EQ(index->weight_map.at(t.name), name) << t.name;
    }
    // Only a tensor bigger than the limit (the 6400-byte embedding is not)
    // may take a shard over it.
    EXPECT_LE(bytes, limit) << name;
    total += bytes;
    tensors += f->tensors().size();
  }
  EXPECT_EQ(tensors, index->weight_map.size());
  EXPECT_EQ(index->total_size, total);
  CausalLM b = random_model(arch, 8);
  const Status s = load_hf_weights(b, dir.file("hf"));
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_identical(a, b);
}

TEST(HfCheckpointTest, SavingReplacesAnExistingFolderOnlyAsAWhole) {
  TempDir dir;
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, false);
  CausalLM a = random_model(arch, 9), b = random_model(arch, 10);
  ASSERT_TRUE(save_hf_model(a, dir.file("hf"), 4096).is_ok());  // sharded
  dir.write("hf/stale.txt", "from an earlier run");
  ASSERT_TRUE(save_hf_model(b, dir.file("hf"), 0).is_ok());  // one file
  EXPECT_EQ(folder_files(dir.file("hf")), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_FALSE(fs::exists(dir.file("hf.tmp")));
  EXPECT_FALSE(fs::exists(dir.file("hf.old")));
  CausalLM c = random_model(arch, 11);
  ASSERT_TRUE(load_hf_weights(c, dir.file("hf")).is_ok());
  expect_identical(b, c);

  // A failed save (a negative shard limit) leaves the folder as it was.
  const std::string before = read_all(dir.file("hf/model.safetensors"));
  const Status bad = save_hf_model(a, dir.file("hf"), -1);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_all(dir.file("hf/model.safetensors")), before);
}

TEST(HfCheckpointTest, LlamaProjectionsFillTheFusedParametersInOrder) {
  TempDir dir;
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, true);
  CausalLM a = random_model(arch, 12);
  ASSERT_TRUE(save_hf_model(a, dir.file("hf"), 0).is_ok());
  // Each of layer 0's projections set to its own constant, by hand.
  const std::vector<std::pair<std::string, float>> marks = {
      {"q_proj", 1.f}, {"k_proj", 2.f}, {"v_proj", 3.f}, {"gate_proj", 4.f}, {"up_proj", 5.f}};
  std::vector<std::vector<float>> storage;
  rewrite(dir.file("hf/model.safetensors"), [&](std::vector<io::TensorToWrite>& ts) {
    for (auto& t : ts) {
      for (const auto& [proj, value] : marks) {
        if (t.name.find("layers.0.") != std::string::npos && t.name.find(proj + ".weight") != std::string::npos) {
          storage.emplace_back(t.data.size() / 4, value);
          t.data = std::as_bytes(std::span<const float>(storage.back()));
        }
      }
    }
  });
  ASSERT_TRUE(load_hf_weights(a, dir.file("hf")).is_ok());
  const auto p = a->named_parameters();
  const torch::Tensor qkv = p["layer0.qkv"], gate_up = p["layer0.gate_up"];
  // q: 4 heads x 8 = 32 rows, then k and v: 2 heads x 8 = 16 rows each.
  EXPECT_TRUE(torch::all(qkv.narrow(0, 0, 32) == 1).item<bool>());
  EXPECT_TRUE(torch::all(qkv.narrow(0, 32, 16) == 2).item<bool>());
  EXPECT_TRUE(torch::all(qkv.narrow(0, 48, 16) == 3).item<bool>());
  EXPECT_TRUE(torch::all(gate_up.narrow(0, 0, 48) == 4).item<bool>());
  EXPECT_TRUE(torch::all(gate_up.narrow(0, 48, 48) == 5).item<bool>());
  EXPECT_FALSE(torch::all(p["layer1.qkv"] == 1).item<bool>());
}

TEST(HfCheckpointTest, Gpt2FilesWithoutPrefixAndWithMaskBuffersLoad) {
  TempDir dir;
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kGpt2, true);
  CausalLM a = random_model(arch, 13), b = random_model(arch, 14);
  ASSERT_TRUE(save_hf_model(a, dir.file("hf"), 0).is_ok());
  // The original openai-community/gpt2 layout: no "transformer." prefix,
  // causal-mask buffers stored beside the weights.
  std::vector<float> mask(16 * 16, 1.f);
  rewrite(dir.file("hf/model.safetensors"), [&](std::vector<io::TensorToWrite>& ts) {
    for (auto& t : ts) t.name = t.name.substr(std::string("transformer.").size());
    for (int i = 0; i < 2; ++i) {
      ts.push_back({"h." + std::to_string(i) + ".attn.bias", io::DType::kF32, {1, 1, 16, 16},
                    std::as_bytes(std::span<const float>(mask))});
    }
    ts.push_back({"h.0.attn.masked_bias", io::DType::kF32, {}, std::as_bytes(std::span<const float>(mask).first(1))});
  });
  const Status s = load_hf_weights(b, dir.file("hf"));
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_identical(a, b);
  EXPECT_TRUE(torch::equal(logits_of(a), logits_of(b)));
}

// ---- load errors ---------------------------------------------------------------

struct LoadError {
  std::string label;
  std::function<void(const TempDir&)> damage;  // applied to dir/hf, a saved untied llama
  StatusCode code;
  std::string expected;
};

TEST(HfCheckpointTest, EveryLoadErrorNamesFileAndTensorAndLeavesTheModelUnchanged) {
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, false);
  std::vector<float> extra(48 * 32, 0.f);
  std::vector<std::int32_t> ints(50 * 32, 0);
  const std::vector<LoadError> cases = {
      {"missing tensor",
       [](const TempDir& d) {
         rewrite(d.file("hf/model.safetensors"), [](auto& ts) {
           std::erase_if(ts, [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
         });
       },
       StatusCode::kInvalidArgument, "missing tensor model.layers.1.mlp.up_proj.weight"},
      {"unexpected tensor",
       [&](const TempDir& d) {
         rewrite(d.file("hf/model.safetensors"), [&](auto& ts) {
           ts.push_back({"model.layers.2.mlp.up_proj.weight", io::DType::kF32, {48, 32},
                         std::as_bytes(std::span<const float>(extra))});
         });
       },
       StatusCode::kInvalidArgument, "unexpected tensor model.layers.2.mlp.up_proj.weight in model.safetensors"},
      {"unsupported dtype",
       [&](const TempDir& d) {
         rewrite(d.file("hf/model.safetensors"), [&](auto& ts) {
           for (auto& t : ts) {
             if (t.name == "model.embed_tokens.weight") {
               t.dtype = io::DType::kI32;
               t.data = std::as_bytes(std::span<const std::int32_t>(ints));
             }
           }
         });
       },
       StatusCode::kInvalidArgument,
       "model.embed_tokens.weight in model.safetensors: dtype I32 is not supported (expected F32, F16 or BF16)"},
      {"wrong shape in a shard",
       [&](const TempDir& d) {
         dsl::ModelArch wide = arch;
         wide.kv_heads = 4;
         fs::remove_all(d.file("hf"));
         ASSERT_TRUE(save_hf_model(random_model(wide, 20), d.file("hf"), 3000).is_ok());
       },
       StatusCode::kInvalidArgument, "model.layers.0.self_attn.k_proj.weight in model-0000"},
      {"index naming a missing shard",
       [](const TempDir& d) {
         fs::remove_all(d.file("hf"));
         ASSERT_TRUE(save_hf_model(random_model(tiny(dsl::ModelFamily::kLlama, false), 21), d.file("hf"), 3000).is_ok());
         const auto index = io::read_shard_index(d.file("hf/model.safetensors.index.json"));
         ASSERT_TRUE(index.is_ok());
         const std::string last = index->weight_map.at("lm_head.weight");
         fs::remove(d.file("hf/" + last));
       },
       StatusCode::kInvalidArgument, ", which does not exist in"},
      {"config.json but no weights", [](const TempDir& d) { fs::remove(d.file("hf/model.safetensors")); },
       StatusCode::kNotFound, "no weights in"},
      {"corrupt file", [](const TempDir& d) { d.write("hf/model.safetensors", std::string("\x10\0\0\0\0\0\0\0{", 9)); },
       StatusCode::kInvalidArgument, "model.safetensors: header length 16 runs past the end"},
  };
  for (const LoadError& c : cases) {
    SCOPED_TRACE(c.label);
    TempDir dir;
    ASSERT_TRUE(save_hf_model(random_model(arch, 15), dir.file("hf"), 0).is_ok());
    c.damage(dir);
    CausalLM m = random_model(arch, 16), untouched = random_model(arch, 16);
    const Status s = load_hf_weights(m, dir.file("hf"));
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(dir.file("hf")), std::string::npos) << s.message();
    expect_identical(m, untouched);
  }
}

TEST(HfCheckpointTest, WrongShapeMessageGivesBothShapes) {
  TempDir dir;
  dsl::ModelArch narrow = tiny(dsl::ModelFamily::kLlama, false), wide = narrow;
  wide.kv_heads = 4;
  ASSERT_TRUE(save_hf_model(random_model(wide, 22), dir.file("hf"), 3000).is_ok());
  const auto index = io::read_shard_index(dir.file("hf/model.safetensors.index.json"));
  ASSERT_TRUE(index.is_ok());
  const std::string shard = index->weight_map.at("model.layers.0.self_attn.k_proj.weight");
  CausalLM m = random_model(narrow, 23);
  const Status s = load_hf_weights(m, dir.file("hf"));
  EXPECT_NE(s.message().find("model.layers.0.self_attn.k_proj.weight in " + shard +
                             ": shape [32, 32], expected [16, 32] for this config"),
            std::string::npos)
      << s.message();
}

TEST(HfCheckpointTest, HarmlessExtrasAreIgnored) {
  TempDir dir;
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, true);
  CausalLM a = random_model(arch, 24), b = random_model(arch, 25);
  ASSERT_TRUE(save_hf_model(a, dir.file("hf"), 0).is_ok());
  std::vector<float> inv(4, 1.f), head(50 * 32, 0.f);
  rewrite(dir.file("hf/model.safetensors"), [&](std::vector<io::TensorToWrite>& ts) {
    ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", io::DType::kF32, {4},
                  std::as_bytes(std::span<const float>(inv))});
    // A tied model's file may carry the head anyway; the embedding wins.
    ts.push_back({"lm_head.weight", io::DType::kF32, {50, 32}, std::as_bytes(std::span<const float>(head))});
  });
  ASSERT_TRUE(load_hf_weights(b, dir.file("hf")).is_ok());
  expect_identical(a, b);
}

// ---- the trainer --------------------------------------------------------------

std::string corpus() {
  std::string text;
  const char* words[] = {"the tailor mends a coat", "a weaver folds the sails", "the miller counts apples",
                         "my neighbour paints the gate"};
  for (int i = 0; i < 60; ++i) text += std::string(words[i % 4]) + " by the river.\n\n";
  return text;
}

RunConfig job_from_folder(const TempDir& dir, const std::string& folder, std::int64_t steps) {
  const std::string data = dir.write("data.txt", corpus());
  // A model folder carries its tokenizer (a folder without one is refused).
  if (!fs::exists(folder + "/tokenizer.json")) {
    std::ofstream(folder + "/tokenizer.json", std::ios::binary) << tailor::testing::byte_level_tokenizer_json();
  }
  const std::string spec = "apiVersion: tailor/v1\nkind: TrainingJob\nname: hf\nmodel: {path: " + folder +
                           "}\ndata: {train: " + data + ", seq_len: 32}\ntraining: {global_batch_size: 8, max_steps: " +
                           std::to_string(steps) + ", lr: 1e-3, seed: 7}\n";
  const auto loaded = dsl::load_job_spec(dir.write("job.yaml", spec));
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  RunConfig cfg;
  if (!loaded.ok()) return cfg;
  cfg.spec = *loaded.spec;
  cfg.strategy.precision = dsl::Precision::kFp32;
  cfg.strategy.micro_batch_size = 8;
  cfg.strategy.grad_accumulation = 1;
  cfg.on_cpu = true;
  return cfg;
}

RunnerExit train_in(const RunConfig& cfg, const std::string& out) {
  TrainOptions o;
  o.config = cfg;
  o.out_dir = out;
  o.memory_limit = 0;
  o.quiet = true;
  return train(o);
}

// The loss of `m` on the first batch the trainer draws for `cfg`: the same
// tokenizer, data and batcher settings as the trainer's.
double first_batch_loss(CausalLM& m, const RunConfig& cfg) {
  auto tok = data::make_tokenizer(cfg.spec.model);
  EXPECT_TRUE(tok.is_ok());
  auto tokenized = data::load_tokenized(cfg.spec.data.train, cfg.spec.data, **tok, "");
  EXPECT_TRUE(tokenized.is_ok());
  data::Batcher batcher(std::move(tokenized->store), cfg.spec.data.seq_len, cfg.spec.data.packing,
                        cfg.strategy.micro_batch_size, static_cast<std::uint64_t>(cfg.spec.training.seed),
                        (*tok)->pad_id());
  const data::Batch b = batcher.next();
  auto t = [&](const std::vector<std::int32_t>& v) {
    return torch::tensor(std::vector<std::int64_t>(v.begin(), v.end())).view({b.rows, b.seq_len});
  };
  torch::NoGradGuard no_grad;
  m->train();  // as in the trainer's step (the model has no dropout)
  ModelInput in{t(b.inputs), t(b.positions), t(b.segment_ids)};
  return cross_entropy_sum(m->logits(m->hidden_states(in)), t(b.targets)).item<double>() /
         static_cast<double>(b.target_tokens);
}

std::vector<nlohmann::json> lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(HfCheckpointTest, TrainingStartsFromTheFolderAndWritesAnHfModel) {
  TempDir dir;
  dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, false);
  arch.vocab = 260;  // the folder's tokenizer's 257 ids fit
  arch.hidden = 64;
  arch.max_seq_len = 64;
  // Weights far from any initialisation: a sharp head makes the loss differ
  // clearly from a fresh model's ~ln(260).
  CausalLM source = random_model(arch, 30);
  {
    torch::NoGradGuard no_grad;
    source->named_parameters()["lm_head"].mul_(4);
  }
  ASSERT_TRUE(save_hf_model(source, dir.file("hf"), 0).is_ok());
  const RunConfig cfg = job_from_folder(dir, dir.file("hf"), 2);
  ASSERT_EQ(cfg.spec.model.arch.hidden, 64);
  const std::string out = dir.file("out");
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);

  const auto metrics = lines(out + "/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 2u);
  const double trained_step1 = metrics[0]["loss"].get<double>();
  CausalLM loaded(cfg.spec.model.arch, 0);
  ASSERT_TRUE(load_hf_weights(loaded, dir.file("hf")).is_ok());
  const double expected = first_batch_loss(loaded, cfg);
  torch::manual_seed(7);
  CausalLM fresh(cfg.spec.model.arch, 0);
  const double fresh_loss = first_batch_loss(fresh, cfg);
  EXPECT_GT(std::abs(expected - fresh_loss), 1.0) << expected << " vs a fresh model's " << fresh_loss;
  EXPECT_NEAR(trained_step1, expected, 1e-5 * expected);

  // OUT/model/ is the final model: it loads back to the final checkpoint's
  // parameters (a full fine-tune's checkpoint holds them all).
  EXPECT_TRUE(fs::exists(out + "/model/config.json"));
  CausalLM final_model(cfg.spec.model.arch, 0);
  const Status s = load_hf_weights(final_model, out + "/model");
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const auto last = latest_checkpoint(out + "/checkpoints");
  ASSERT_TRUE(last.has_value());
  auto checkpoint = load_checkpoint(*last);
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  const std::vector<torch::Tensor>& saved = checkpoint->second.params;
  const auto params = final_model->parameters();
  ASSERT_EQ(saved.size(), params.size());
  for (std::size_t i = 0; i < saved.size(); ++i) EXPECT_TRUE(torch::equal(saved[i], params[i])) << i;
  EXPECT_FALSE(torch::equal(final_model->named_parameters()["embed.weight"], loaded->named_parameters()["embed.weight"]));
  // It declares the folder's tokenizer's special ids (not the byte-level
  // tokenizer's), for the model and for generate(), and carries its file.
  auto tok = data::make_tokenizer(cfg.spec.model);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  ASSERT_NE((*tok)->eos_id(), data::ByteTokenizer::kEos);
  const auto config = nlohmann::json::parse(read_all(out + "/model/config.json"));
  EXPECT_EQ(config["bos_token_id"], (*tok)->bos_id());
  EXPECT_EQ(config["eos_token_id"], (*tok)->eos_id());
  const auto generation = nlohmann::json::parse(read_all(out + "/model/generation_config.json"));
  EXPECT_EQ(generation["eos_token_id"], (*tok)->eos_id());
  EXPECT_EQ(read_all(out + "/model/tokenizer.json"), read_all(dir.file("hf/tokenizer.json")));
}

// The source folder's tokenizer files travel with the export, unchanged;
// without a tokenizer nothing is added.
TEST(HfCheckpointTest, ExportCarriesTheTokenizerFilesAndSpecialIds) {
  TempDir dir;
  const dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, false);
  CausalLM model = random_model(arch, 3);
  const std::string sp = dir.write("src/tokenizer.model", std::string("\x0a\x05piece\x00binary", 14));
  dir.write("src/tokenizer_config.json", R"({"add_bos_token": true})");
  dir.write("src/README.md", "not a tokenizer file");
  HfExport extras;
  extras.tokens = {1, 2};
  extras.tokenizer_from = dir.file("src");
  ASSERT_TRUE(save_hf_model(model, dir.file("out"), 0, extras).is_ok());
  EXPECT_EQ(read_all(dir.file("out/tokenizer.model")), read_all(sp));
  EXPECT_EQ(read_all(dir.file("out/tokenizer_config.json")), R"({"add_bos_token": true})");
  EXPECT_FALSE(fs::exists(dir.file("out/README.md")));
  const auto config = nlohmann::json::parse(read_all(dir.file("out/config.json")));
  EXPECT_EQ(config["bos_token_id"], 1);
  EXPECT_EQ(config["eos_token_id"], 2);
  ASSERT_TRUE(save_hf_model(model, dir.file("plain"), 0).is_ok());
  EXPECT_FALSE(fs::exists(dir.file("plain/generation_config.json")));
  // No ids known: null, not the config class's default (GPT-2's 50256).
  const auto plain = nlohmann::json::parse(read_all(dir.file("plain/config.json")));
  EXPECT_TRUE(plain.at("bos_token_id").is_null());
  EXPECT_TRUE(plain.at("eos_token_id").is_null());
  // Trained on bytes: the folder gets the byte tokenizer's files, so it is a
  // model.path that reads as the same ids (a folder without tokenizer files
  // is refused).
  dsl::ModelArch byte_arch = arch;
  byte_arch.vocab = 260;  // as tiny-llama-byte: the byte tokenizer's 259 ids and one spare
  HfExport bytes;
  bytes.tokens = {data::ByteTokenizer::kBos, data::ByteTokenizer::kEos};
  bytes.byte_tokenizer = true;
  ASSERT_TRUE(save_hf_model(random_model(byte_arch, 3), dir.file("bytes"), 0, bytes).is_ok());
  EXPECT_EQ(read_all(dir.file("bytes/tokenizer.json")), data::byte_tokenizer_json());
  dsl::ModelSpec again;
  again.path = dir.file("bytes");
  again.arch = byte_arch;
  auto tok = data::make_tokenizer(again);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->bos_id(), data::ByteTokenizer::kBos);
  EXPECT_EQ((*tok)->eos_id(), data::ByteTokenizer::kEos);
  EXPECT_EQ((*tok)->encode("caf\xC3\xA9 x"), data::ByteTokenizer().encode("caf\xC3\xA9 x"));
}

TEST(HfCheckpointTest, AFolderWithConfigButNoWeightsIsBadInput) {
  TempDir dir;
  dsl::ModelArch arch = tiny(dsl::ModelFamily::kLlama, false);
  arch.vocab = 260;
  arch.max_seq_len = 64;
  fs::create_directories(dir.file("hf"));
  ASSERT_TRUE(io::write_hf_config(dir.file("hf/config.json"), arch, "float32").is_ok());
  const RunConfig cfg = job_from_folder(dir, dir.file("hf"), 2);
  const std::string out = dir.file("out");
  EXPECT_EQ(train_in(cfg, out), RunnerExit::kBadInput);
  const auto events = lines(out + "/events.jsonl");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["event"], "error");
  EXPECT_NE(events.back()["message"].get<std::string>().find("no weights in"), std::string::npos) << events.back();
  EXPECT_FALSE(fs::exists(out + "/model"));
}

}  // namespace
}  // namespace tailor::runner
