#include "dsl/catalog.h"

#include <gtest/gtest.h>

#include "dsl/model_family.h"
#include "tests/testing/temp_dir.h"

namespace tailor::dsl {
namespace {

TEST(CatalogTest, BuiltinHasEveryRequiredPreset) {
  const Catalog& c = Catalog::builtin();
  // clang-format off
  for (const char* name :
       {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b",
        "llama-3.1-8b", "llama-3-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "mistral-7b", "qwen2.5-0.5b",
        "qwen2.5-1.5b", "qwen2.5-7b", "gemma-2-2b", "gemma-2-9b", "gemma-2-27b", "gemma-3-270m", "gemma-3-1b",
        "pythia-160m", "pythia-6.9b", "tinyllama-1.1b", "tiny-llama", "tiny-llama-byte", "tiny-gpt2"}) {
    // clang-format on
    EXPECT_NE(c.find_model(name), nullptr) << name;
  }
}

TEST(CatalogTest, BuiltinHasEveryRequiredGpu) {
  const Catalog& c = Catalog::builtin();
  for (const char* key : {"T4", "V100-16", "V100-32", "RTX-3090", "RTX-4090", "A10", "L4", "A6000", "L40S", "A100-40",
                          "A100-80", "H100-80", "H200"}) {
    EXPECT_NE(c.find_gpu(key), nullptr) << key;
  }
}

// The published counts are independent facts (model cards, papers): the
// architecture formulas must reproduce them exactly.
TEST(CatalogTest, ArchitecturesReproducePublishedParameterCounts) {
  const Catalog& c = Catalog::builtin();
  EXPECT_EQ(c.find_model("gpt2")->arch.parameter_count(), 124'439'808);
  EXPECT_EQ(c.find_model("llama-2-7b")->arch.parameter_count(), 6'738'415'616);
  EXPECT_EQ(c.find_model("tinyllama-1.1b")->arch.parameter_count(), 1'100'048'384);
  EXPECT_EQ(c.find_model("mistral-7b")->arch.parameter_count(), 7'241'732'096);
  EXPECT_EQ(c.find_model("llama-3-8b")->arch.parameter_count(), 8'030'261'248);
  EXPECT_EQ(c.find_model("gemma-2-2b")->arch.parameter_count(), 2'614'341'888);
  EXPECT_EQ(c.find_model("gemma-2-27b")->arch.parameter_count(), 27'227'128'320);
  EXPECT_EQ(c.find_model("gemma-3-1b")->arch.parameter_count(), 999'885'952);
  EXPECT_EQ(c.find_model("pythia-160m")->arch.parameter_count(), 162'322'944);
  EXPECT_EQ(c.find_model("pythia-12b")->arch.parameter_count(), 11'846'072'320);
  for (const ModelPreset& m : c.models()) EXPECT_EQ(m.params, m.arch.parameter_count()) << m.name;
}

// Llama 3.1 and 3.2 stretch 8192 pretrained positions with llama3 RoPE
// scaling; their presets carry it, so plans, runs and exports use it.
TEST(CatalogTest, Llama31And32PresetsScaleRopeAsTheirConfigsSay) {
  const Catalog& c = Catalog::builtin();
  for (const auto& [name, factor] : {std::pair{"llama-3.1-8b", 8.0}, std::pair{"llama-3.2-1b", 32.0},
                                     std::pair{"llama-3.2-3b", 32.0}}) {
    const RopeScaling& r = c.find_model(name)->arch.rope_scaling;
    EXPECT_EQ(r.type, RopeScalingType::kLlama3) << name;
    EXPECT_DOUBLE_EQ(r.factor, factor) << name;
    EXPECT_DOUBLE_EQ(r.low_freq_factor, 1.0) << name;
    EXPECT_DOUBLE_EQ(r.high_freq_factor, 4.0) << name;
    EXPECT_EQ(r.original_max_seq_len, 8192) << name;
  }
  EXPECT_EQ(c.find_model("llama-3-8b")->arch.rope_scaling.type, RopeScalingType::kNone);
}

// Gemma 2's presets say what its config.json files say (Gemma2Config's
// defaults): caps of 50 and 30, a 4096 window on even layers, and scores
// scaled by 256^-1/2, except 27B's 144 = hidden / heads.
TEST(CatalogTest, Gemma2PresetsCapAndWindowAsTheirConfigsSay) {
  const Catalog& c = Catalog::builtin();
  for (const auto& [name, scalar] : {std::pair{"gemma-2-2b", 256}, {"gemma-2-9b", 256}, {"gemma-2-27b", 144}}) {
    const ModelArch& a = c.find_model(name)->arch;
    EXPECT_EQ(a.family, ModelFamily::kGemma2) << name;
    EXPECT_DOUBLE_EQ(a.attn_logit_softcap, 50.0) << name;
    EXPECT_DOUBLE_EQ(a.final_logit_softcap, 30.0) << name;
    EXPECT_EQ(a.sliding_window, 4096) << name;
    EXPECT_EQ(a.query_pre_attn_scalar, scalar) << name;
    EXPECT_TRUE(a.tie_embeddings) << name;
  }
}

// Gemma 3's text presets: no caps, q/k norms, windows of 512 on five layers
// in six, rotated by base 10000 while the global layers use 1e6.
TEST(CatalogTest, Gemma3PresetsWindowAndRotateAsTheirConfigsSay) {
  const Catalog& c = Catalog::builtin();
  for (const char* name : {"gemma-3-270m", "gemma-3-1b"}) {
    const ModelArch& a = c.find_model(name)->arch;
    EXPECT_EQ(a.family, ModelFamily::kGemma3) << name;
    EXPECT_EQ(a.attn_logit_softcap, 0.0) << name;
    EXPECT_EQ(a.sliding_window, 512) << name;
    EXPECT_DOUBLE_EQ(a.rope_theta, 1e6) << name;
    EXPECT_DOUBLE_EQ(a.rope_local_theta, 1e4) << name;
    EXPECT_EQ(layer_window(a, 4), 512) << name;
    EXPECT_EQ(layer_window(a, 5), 0) << name;
  }
}

TEST(CatalogTest, GqaModelsHaveFewerKvHeads) {
  const ModelArch& a = Catalog::builtin().find_model("llama-3-70b")->arch;
  EXPECT_EQ(a.heads, 64);
  EXPECT_EQ(a.kv_heads, 8);
}

TEST(CatalogTest, GpuLookupIsCaseInsensitiveAndFactsAreConsistent) {
  const Catalog& c = Catalog::builtin();
  const GpuModel* a6000 = c.find_gpu("a6000");
  ASSERT_NE(a6000, nullptr);
  EXPECT_EQ(a6000->memory, Bytes::gib(48));
  EXPECT_TRUE(a6000->bf16);
  EXPECT_FALSE(c.find_gpu("T4")->bf16);
  for (const GpuModel& g : c.gpus()) {
    EXPECT_EQ(g.bf16, g.peak_tflops_bf16 > 0) << g.key;
    EXPECT_GT(g.memory, Bytes::gib(8)) << g.key;
  }
}

// GPU names as people type them: separators, memory units and vendor words
// do not matter; a model whose memory variants differ must say which.
// A plan can use what the driver reports, not the capacity as sold: a T4
// sold as 16 GB has 15360 MiB.
TEST(CatalogTest, GpuMemoriesAreWhatTheDriverReports) {
  const Catalog& c = Catalog::builtin();
  EXPECT_EQ(c.find_gpu("T4")->memory, Bytes::mib(15360));
  EXPECT_EQ(c.find_gpu("L4")->memory, Bytes::mib(23034));
  EXPECT_EQ(c.find_gpu("H100-80")->memory, Bytes::mib(81559));
  EXPECT_EQ(c.find_gpu("H200")->memory, Bytes::mib(143771));
}

TEST(CatalogTest, GpuNamesAreFoundAsUsersTypeThemAndAmbiguityIsNamed) {
  const Catalog& c = Catalog::builtin();
  const std::pair<const char*, const char*> found[] = {
      {"A100-80GB", "A100-80"}, {"a100 40gb", "A100-40"}, {"A100_80G", "A100-80"}, {"H100", "H100-80"},
      {"nvidia h100", "H100-80"}, {"RTX4090", "RTX-4090"}, {"4090", "RTX-4090"}, {"GeForce RTX 3090", "RTX-3090"},
      {"RTX A6000", "A6000"}, {"a10", "A10"}, {"L4", "L4"}, {"l40s", "L40S"}, {"V100-32GB", "V100-32"}};
  for (const auto& [typed, key] : found) {
    const GpuModel* g = c.find_gpu(typed);
    ASSERT_NE(g, nullptr) << typed;
    EXPECT_EQ(g->key, key) << typed;
  }
  for (const char* several : {"A100", "V100", "nvidia a100"}) {
    EXPECT_EQ(c.find_gpu(several), nullptr) << several;
    EXPECT_EQ(c.gpus_matching(several).size(), 2u) << several;
  }
  for (const char* none : {"H1", "B9000", "", "80", "16GB"}) EXPECT_TRUE(c.gpus_matching(none).empty()) << none;
}

TEST(CatalogTest, DeviceNamesMatchTheLongestSubstring) {
  const Catalog& c = Catalog::builtin();
  ASSERT_NE(c.match_gpu_name("NVIDIA A100-SXM4-80GB"), nullptr);
  EXPECT_EQ(c.match_gpu_name("NVIDIA A100-SXM4-80GB")->key, "A100-80");
  ASSERT_NE(c.match_gpu_name("NVIDIA L40S"), nullptr);
  EXPECT_EQ(c.match_gpu_name("NVIDIA L40S")->key, "L40S");
  ASSERT_NE(c.match_gpu_name("NVIDIA GeForce RTX 4090"), nullptr);
  EXPECT_EQ(c.match_gpu_name("NVIDIA GeForce RTX 4090")->key, "RTX-4090");
  EXPECT_EQ(c.match_gpu_name("Some Other Accelerator"), nullptr);
}

TEST(CatalogTest, CatalogFolderErrorsCarryPositions) {
  tailor::testing::TempDir dir;
  dir.write("models.yaml",
            "apiVersion: tailor/v1\nkind: ModelCatalog\nmodels:\n  m:\n    params: 5\n    arch: {family: llama, layers: "
            "1, hidden: 8, intermediate: 16, heads: 2, vocab: 4, max_seq_len: 8}\n");
  dir.write("gpus.yaml", "apiVersion: tailor/v1\nkind: GpuCatalog\ngpus: {}\n");
  auto r = Catalog::load_dir(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("models.yaml:4:3: error: models.m.params: published count 5 differs"),
            std::string::npos)
      << r.status().message();
}

// The Hugging Face repositories a preset describes are catalog data: found
// in any case, each under one preset, written in lower case without an
// organisation.
TEST(CatalogTest, HubRepositoriesNameOnePresetEach) {
  const Catalog& c = Catalog::builtin();
  ASSERT_NE(c.find_by_hub_repo("Meta-Llama-3-8B-Instruct"), nullptr);
  EXPECT_EQ(c.find_by_hub_repo("Meta-Llama-3-8B-Instruct")->name, "llama-3-8b");
  EXPECT_EQ(c.find_by_hub_repo("gemma-3-1b-pt")->name, "gemma-3-1b");
  EXPECT_EQ(c.find_by_hub_repo("mistral-7b-v0.3"), nullptr);  // another vocabulary and RoPE base
  const std::string arch = "arch: {family: llama, layers: 1, hidden: 8, intermediate: 16, heads: 2, vocab: 4, "
                           "max_seq_len: 8}";
  auto parse = [&](const std::string& a_repos, const std::string& b_repos) {
    const std::string models = "apiVersion: tailor/v1\nkind: ModelCatalog\nmodels:\n  a:\n    params: 728\n    hub_repos: " +
                               a_repos + "\n    " + arch + "\n  b:\n    params: 728\n    hub_repos: " + b_repos +
                               "\n    " + arch + "\n";
    Diagnostics d;
    auto cat = Catalog::parse(models, "models.yaml", "apiVersion: tailor/v1\nkind: GpuCatalog\ngpus: {}\n", "gpus.yaml", d);
    return std::make_pair(cat.has_value() && !d.has_errors(), d.to_string());
  };
  const auto ok = parse("[x-1b]", "[x-1b-instruct]");
  EXPECT_TRUE(ok.first) << ok.second;
  const auto twice = parse("[x-1b]", "[x-1b]");
  EXPECT_FALSE(twice.first);
  EXPECT_NE(twice.second.find("models.b.hub_repos: \"x-1b\" is listed under a too"), std::string::npos) << twice.second;
  const auto upper = parse("[X-1b]", "[]");
  EXPECT_NE(upper.second.find("must be a lower-case repository name"), std::string::npos) << upper.second;
  const auto org = parse("[org/x-1b]", "[]");
  EXPECT_NE(org.second.find("names an organisation"), std::string::npos) << org.second;
}

}  // namespace
}  // namespace tailor::dsl
