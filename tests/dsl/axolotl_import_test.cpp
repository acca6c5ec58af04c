#include "dsl/axolotl_import.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dsl/spec_loader.h"
#include "dsl/yaml_tree.h"
#include "tests/testing/temp_dir.h"

namespace tailor::dsl {
namespace {

using tailor::testing::TempDir;

std::string fixture_path(const std::string& name) {
  return std::string(TAILOR_SOURCE_DIR) + "/tests/dsl/axolotl/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An import and its spec parsed back, so tests check fields, not text.
struct Imported {
  AxolotlImport result;
  Node spec;

  // The scalar at a dotted path, "<missing>" when absent, "<list>"/"<map>" otherwise.
  std::string at(const std::string& dotted) const {
    const Node* n = &spec;
    std::size_t start = 0;
    while (n != nullptr && start <= dotted.size()) {
      const std::size_t dot = dotted.find('.', start);
      const std::string key = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      n = n->find(key);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (n == nullptr) return "<missing>";
    if (n->is_map()) return "<map>";
    if (n->is_sequence()) return "<list>";
    return n->scalar;
  }

  std::vector<std::string> list_at(const std::string& dotted) const {
    std::vector<std::string> out;
    const Node* n = &spec;
    for (std::size_t start = 0;;) {
      const std::size_t dot = dotted.find('.', start);
      n = n->find(dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (n == nullptr || dot == std::string::npos) break;
      start = dot + 1;
    }
    if (n != nullptr) {
      for (const Node& i : n->items) out.push_back(i.scalar);
    }
    return out;
  }

  std::vector<Diagnostic> warnings_for(const std::string& path) const {
    std::vector<Diagnostic> out;
    for (const Diagnostic& d : result.diagnostics.items()) {
      if (d.severity == Severity::kWarning && d.path == path) out.push_back(d);
    }
    return out;
  }

  // The one warning for `path`; fails the test when there is not exactly one.
  Diagnostic warning_for(const std::string& path) const {
    auto w = warnings_for(path);
    EXPECT_EQ(w.size(), 1u) << "warnings for " << path << ":\n" << result.diagnostics.to_string();
    return w.empty() ? Diagnostic{} : w.front();
  }
};

// Every converted spec must load; check_files is off because the data and
// model folders live on the machine that will train.
void expect_loads(const AxolotlImport& r) {
  LoadOptions opts;
  opts.check_files = false;
  const LoadedSpec loaded = load_job_spec_text(r.spec_yaml, "imported.yaml", "/tmp", opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string() << "\n--- spec ---\n" << r.spec_yaml;
}

Imported convert(const std::string& text, const std::string& file = "axolotl.yml", const std::string& job = "job") {
  Imported out{import_axolotl(text, file, job), {}};
  EXPECT_TRUE(out.result.ok()) << out.result.diagnostics.to_string();
  Diagnostics d;
  auto spec = parse_yaml(out.result.spec_yaml, "converted.yaml", d);
  EXPECT_TRUE(spec.has_value()) << d.to_string() << "\n" << out.result.spec_yaml;
  if (spec) out.spec = std::move(*spec);
  expect_loads(out.result);
  return out;
}

// 1-based line of the first line that starts with `key:`.
int line_of(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind(key + ":", 0) == 0) return n;
  }
  return 0;
}

// ---- fixtures ------------------------------------------------------------------

TEST(AxolotlImportTest, QloraExampleMapsModelAdapterAndHyperparameters) {
  const std::string text = read_file(fixture_path("llama2_qlora.yml"));
  const Imported r = convert(text, fixture_path("llama2_qlora.yml"), "llama2-qlora");

  EXPECT_EQ(r.at("apiVersion"), "tailor/v1");
  EXPECT_EQ(r.at("kind"), "TrainingJob");
  EXPECT_EQ(r.at("name"), "llama2-qlora");
  EXPECT_EQ(r.at("model.preset"), "llama-2-7b");
  EXPECT_EQ(r.at("planner.runtime"), "hf");  // plans predict the Axolotl run's memory
  EXPECT_EQ(r.at("strategy.adapter"), "qlora");
  EXPECT_EQ(r.at("strategy.lora.r"), "32");
  EXPECT_EQ(r.at("strategy.lora.alpha"), "16");
  EXPECT_EQ(r.at("strategy.lora.dropout"), "0.05");
  EXPECT_EQ(r.at("strategy.lora.targets"), "<missing>");  // lora_target_linear: every linear layer
  EXPECT_EQ(r.at("data.seq_len"), "4096");
  EXPECT_EQ(r.at("data.packing"), "true");
  EXPECT_EQ(r.at("training.micro_batch_size"), "2");
  EXPECT_EQ(r.at("training.global_batch_size"), "8");
  EXPECT_EQ(r.at("training.epochs"), "4");
  EXPECT_EQ(r.at("training.lr"), "0.0002");
  EXPECT_EQ(r.at("training.scheduler"), "cosine");
  EXPECT_EQ(r.at("training.warmup_steps"), "10");
  EXPECT_EQ(r.at("training.weight_decay"), "0");
  EXPECT_EQ(r.at("strategy.precision"), "bf16");  // bf16: auto
  EXPECT_EQ(r.at("strategy.gradient_checkpointing"), "true");
  EXPECT_EQ(r.at("strategy.optimizer"), "adamw");  // paged_adamw_32bit
  EXPECT_EQ(r.at("strategy.zero_stage"), "auto");
  EXPECT_EQ(r.at("strategy.offload"), "auto");
  EXPECT_EQ(r.at("checkpoint"), "<missing>");
}

TEST(AxolotlImportTest, QloraExampleHubDatasetBecomesPlaceholderWithWarning) {
  const std::string text = read_file(fixture_path("llama2_qlora.yml"));
  const Imported r = convert(text, "qlora.yml");
  EXPECT_EQ(r.at("data.train"), "mhenrichsen/alpaca_2k_test");
  EXPECT_EQ(r.at("data.format"), "jsonl");
  EXPECT_EQ(r.at("data.prompt_field"), "instruction");
  EXPECT_EQ(r.at("data.completion_field"), "output");
  const Diagnostic hub = r.warning_for("datasets[0].path");
  EXPECT_NE(hub.message.find("local files only"), std::string::npos) << hub.message;
  EXPECT_EQ(hub.location.line, line_of(text, "  - path"));
  const Diagnostic alpaca = r.warning_for("datasets[0].type");
  EXPECT_NE(alpaca.message.find("\"input\""), std::string::npos) << alpaca.message;
}

TEST(AxolotlImportTest, QloraExampleWarnsOncePerUnmappedKeyAtItsLine) {
  const std::string text = read_file(fixture_path("llama2_qlora.yml"));
  const Imported r = convert(text, "qlora.yml");
  for (const char* key : {"model_type", "tokenizer_type", "is_llama_derived_model", "strict", "val_set_size",
                          "output_dir", "pad_to_sequence_len", "group_by_length", "tf32", "logging_steps",
                          "flash_attention", "evals_per_epoch", "saves_per_epoch", "special_tokens"}) {
    SCOPED_TRACE(key);
    const Diagnostic w = r.warning_for(key);
    EXPECT_EQ(w.location.file, "qlora.yml");
    EXPECT_EQ(w.location.line, line_of(text, key));
    EXPECT_EQ(w.location.column, 1);
    EXPECT_NE(w.message.find("no Tailor equivalent; ignored"), std::string::npos) << w.message;
  }
  // Keys left empty are unset in Axolotl: nothing to carry over, nothing to say.
  for (const char* key : {"wandb_project", "lora_model_dir", "dataset_prepared_path", "deepspeed", "fsdp",
                          "xformers_attention", "debug", "lora_target_modules"}) {
    EXPECT_TRUE(r.warnings_for(key).empty()) << key;
  }
  // Mapped keys whose value carries over say nothing either.
  for (const char* key : {"adapter", "lora_r", "sequence_len", "learning_rate", "bf16", "fp16", "load_in_4bit",
                          "load_in_8bit", "optimizer", "train_on_inputs"}) {
    EXPECT_TRUE(r.warnings_for(key).empty()) << key << ": " << r.result.diagnostics.to_string();
  }
}

TEST(AxolotlImportTest, AccumulationTimesMicroBatchIsGlobalBatchOnOneGpu) {
  const std::string text = read_file(fixture_path("llama2_qlora.yml"));
  const Imported r = convert(text, "qlora.yml");
  const Diagnostic w = r.warning_for("gradient_accumulation_steps");
  EXPECT_EQ(w.location.line, line_of(text, "gradient_accumulation_steps"));
  EXPECT_NE(w.message.find("2 x 4 = 8"), std::string::npos) << w.message;
  EXPECT_NE(w.message.find("one GPU"), std::string::npos) << w.message;

  const Imported odd = convert("base_model: gpt2\nmicro_batch_size: 3\ngradient_accumulation_steps: 5\n");
  EXPECT_EQ(odd.at("training.global_batch_size"), "15");
  EXPECT_EQ(odd.at("training.micro_batch_size"), "3");

  const Imported no_accum = convert("base_model: gpt2\nmicro_batch_size: 6\n");
  EXPECT_EQ(no_accum.at("training.global_batch_size"), "6");
  EXPECT_NE(no_accum.warning_for("micro_batch_size").message.find("one GPU"), std::string::npos);

  // Axolotl's deprecated batch_size: accumulation = batch_size // micro_batch_size.
  const Imported legacy = convert("base_model: gpt2\nmicro_batch_size: 4\nbatch_size: 18\n");
  EXPECT_EQ(legacy.at("training.global_batch_size"), "16");
}

TEST(AxolotlImportTest, LoraZero2ReadsDeepSpeedJsonNextToTheConfig) {
  TempDir dir;
  const std::string text = read_file(fixture_path("mistral_lora_zero2.yml"));
  const std::string file = dir.write("mistral_lora_zero2.yml", text);
  // Axolotl's zero2.json offloads the optimizer to the CPU, which the name does not say.
  dir.write("deepspeed_configs/zero2.json", R"({
  "zero_optimization": {
    "stage": 2,
    "offload_optimizer": {"device": "cpu"},
    "contiguous_gradients": true,
    "overlap_comm": true
  },
  "bf16": {"enabled": "auto"},
  "gradient_accumulation_steps": "auto",
  "train_micro_batch_size_per_gpu": "auto"
})");
  const Imported r = convert(text, file, "mistral-lora");
  EXPECT_EQ(r.at("strategy.zero_stage"), "2");
  EXPECT_EQ(r.at("strategy.offload"), "optimizer");
  EXPECT_TRUE(r.warnings_for("deepspeed").empty()) << r.result.diagnostics.to_string();

  EXPECT_EQ(r.at("model.preset"), "mistral-7b");
  EXPECT_EQ(r.at("strategy.adapter"), "lora");
  EXPECT_EQ(r.list_at("strategy.lora.targets"), (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  EXPECT_EQ(r.at("strategy.lora.dropout"), "0.1");
  EXPECT_EQ(r.at("data.train"), "./data/support_chats.jsonl");
  EXPECT_EQ(r.at("data.eval"), "./data/support_chats_eval.jsonl");
  EXPECT_EQ(r.at("data.field"), "content");
  EXPECT_EQ(r.at("training.global_batch_size"), "32");
  EXPECT_EQ(r.at("training.max_steps"), "600");
  EXPECT_EQ(r.at("training.epochs"), "2");
  EXPECT_EQ(r.at("training.lr"), "5e-05");
  EXPECT_EQ(r.at("training.scheduler"), "linear");
  EXPECT_EQ(r.at("training.warmup_steps"), "18");  // 0.03 x 600
  EXPECT_EQ(r.at("training.eval_every"), "100");
  EXPECT_EQ(r.at("training.seed"), "7");
  EXPECT_EQ(r.at("checkpoint.every_steps"), "200");
  EXPECT_EQ(r.at("checkpoint.keep"), "2");
  EXPECT_EQ(r.at("strategy.precision"), "bf16");
  EXPECT_EQ(r.at("strategy.optimizer"), "adamw");
  EXPECT_NE(r.warning_for("warmup_ratio").message.find("18"), std::string::npos);
  EXPECT_NE(r.warning_for("wandb_project").message.find("ignored"), std::string::npos);
  EXPECT_EQ(r.warning_for("wandb_log_model").location.line, line_of(text, "wandb_log_model"));
}

TEST(AxolotlImportTest, DeepSpeedStageAndOffloadInferredFromNameWhenFileIsMissing) {
  struct Case {
    const char* config;
    const char* stage;
    const char* offload;
  };
  for (const Case& c :
       {Case{"deepspeed_configs/zero1.json", "1", "none"}, Case{"deepspeed_configs/zero2.json", "2", "none"},
        Case{"deepspeed_configs/zero3_bf16.json", "3", "none"},
        Case{"deepspeed_configs/zero3_bf16_cpuoffload_all.json", "3", "optimizer_and_params"},
        Case{"deepspeed_configs/zero3_bf16_cpuoffload_params.json", "3", "optimizer_and_params"}}) {
    SCOPED_TRACE(c.config);
    const std::string text = std::string("base_model: gpt2\ndeepspeed: ") + c.config + "\n";
    const Imported r = convert(text, "/nonexistent-dir/axolotl.yml");
    EXPECT_EQ(r.at("strategy.zero_stage"), c.stage);
    EXPECT_EQ(r.at("strategy.offload"), c.offload);
    const Diagnostic w = r.warning_for("deepspeed");
    EXPECT_EQ(w.location.line, 2);
    EXPECT_NE(w.message.find("not found"), std::string::npos) << w.message;
    EXPECT_NE(w.message.find("inferred from its name"), std::string::npos) << w.message;
  }
  const Imported unknown = convert("base_model: gpt2\ndeepspeed: ds_config.json\n", "/nonexistent-dir/a.yml");
  EXPECT_EQ(unknown.at("strategy.zero_stage"), "auto");
  EXPECT_EQ(unknown.warnings_for("deepspeed").size(), 1u);
}

TEST(AxolotlImportTest, DeepSpeedJsonWithParameterOffloadNeedsStageThree) {
  TempDir dir;
  const std::string file = dir.write("a.yml", "base_model: gpt2\ndeepspeed: ds.json\n");
  dir.write("ds.json", R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                          "offload_param": {"device": "cpu"}}})");
  const Imported r3 = convert(read_file(file), file);
  EXPECT_EQ(r3.at("strategy.zero_stage"), "3");
  EXPECT_EQ(r3.at("strategy.offload"), "optimizer_and_params");

  // Parameter offload under stage 2 is not a thing in DeepSpeed: keep the optimizer offload.
  dir.write("ds.json", R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                          "offload_param": {"device": "cpu"}}})");
  const Imported r2 = convert(read_file(file), file);
  EXPECT_EQ(r2.at("strategy.zero_stage"), "2");
  EXPECT_EQ(r2.at("strategy.offload"), "optimizer");
  EXPECT_EQ(r2.warnings_for("deepspeed").size(), 1u);

  // Not JSON at all: say so and fall back to the name (which says nothing here).
  dir.write("ds.json", "{\"zero_optimization\": [unclosed\n");
  const Imported bad = convert(read_file(file), file);
  EXPECT_EQ(bad.at("strategy.zero_stage"), "auto");
  EXPECT_NE(bad.warning_for("deepspeed").message.find("could not read"), std::string::npos);
}

TEST(AxolotlImportTest, FullFineTuneFp16PinsNoAdapterAndMapsCheckpoints) {
  const std::string text = read_file(fixture_path("tinyllama_full_fp16.yml"));
  const Imported r = convert(text, "tinyllama_full_fp16.yml", "tinyllama-fft");
  EXPECT_EQ(r.at("model.preset"), "tinyllama-1.1b");
  EXPECT_EQ(r.at("strategy.adapter"), "none");  // Axolotl without an adapter trains every weight
  EXPECT_EQ(r.at("strategy.lora"), "<missing>");
  EXPECT_EQ(r.at("strategy.precision"), "fp16");
  EXPECT_EQ(r.at("strategy.optimizer"), "adamw_8bit");  // adamw_bnb_8bit
  EXPECT_EQ(r.at("data.train"), "./data/alpaca_train.json");
  EXPECT_EQ(r.at("data.format"), "json");  // Hugging Face's json loader: an array or JSON Lines
  EXPECT_EQ(r.at("data.prompt_field"), "instruction");
  EXPECT_EQ(r.at("data.packing"), "false");
  EXPECT_EQ(r.at("training.global_batch_size"), "16");
  EXPECT_EQ(r.at("training.max_steps"), "2000");
  EXPECT_EQ(r.at("training.lr"), "1e-05");
  EXPECT_EQ(r.at("training.warmup_steps"), "50");
  EXPECT_EQ(r.at("training.weight_decay"), "0.1");
  EXPECT_EQ(r.at("training.grad_clip"), "0.5");
  EXPECT_EQ(r.at("training.seed"), "1234");
  EXPECT_EQ(r.at("checkpoint.every_steps"), "500");
  EXPECT_EQ(r.at("checkpoint.keep"), "4");
  EXPECT_TRUE(r.warnings_for("val_set_size").empty());      // 0: no split, as Tailor without data.eval
  EXPECT_TRUE(r.warnings_for("datasets[0].path").empty());  // local file
  EXPECT_EQ(r.warning_for("xformers_attention").location.line, line_of(text, "xformers_attention"));
}

// ---- base_model ----------------------------------------------------------------

TEST(AxolotlImportTest, WellKnownHubIdsMapToPresets) {
  struct Case {
    const char* id;
    const char* preset;
  };
  for (const Case& c :
       {Case{"meta-llama/Llama-2-7b-hf", "llama-2-7b"}, Case{"NousResearch/Llama-2-7b-hf", "llama-2-7b"},
        Case{"meta-llama/Llama-2-13b-chat-hf", "llama-2-13b"}, Case{"meta-llama/Llama-2-70b-hf", "llama-2-70b"},
        Case{"meta-llama/Meta-Llama-3-8B", "llama-3-8b"}, Case{"NousResearch/Meta-Llama-3-8B-Instruct", "llama-3-8b"},
        Case{"meta-llama/Meta-Llama-3-70B", "llama-3-70b"}, Case{"meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"},
        Case{"google/gemma-2-9b-it", "gemma-2-9b"}, Case{"google/gemma-3-1b-pt", "gemma-3-1b"},
        Case{"meta-llama/Llama-3.2-1B", "llama-3.2-1b"},
        Case{"meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"}, Case{"mistralai/Mistral-7B-v0.1", "mistral-7b"},
        Case{"TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "tinyllama-1.1b"},
        Case{"TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b"}, Case{"Qwen/Qwen2.5-0.5B", "qwen2.5-0.5b"},
        Case{"Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b"}, Case{"Qwen/Qwen2.5-7B", "qwen2.5-7b"},
        Case{"openai-community/gpt2", "gpt2"}, Case{"openai-community/gpt2-xl", "gpt2-xl"}, Case{"gpt2", "gpt2"},
        Case{"gpt2-medium", "gpt2-medium"}}) {
    SCOPED_TRACE(c.id);
    const Imported r = convert(std::string("base_model: ") + c.id + "\n");
    EXPECT_EQ(r.at("model.preset"), c.preset);
    EXPECT_EQ(r.at("model.path"), "<missing>");
    EXPECT_TRUE(r.warnings_for("base_model").empty()) << r.result.diagnostics.to_string();
  }
}

TEST(AxolotlImportTest, LocalModelFolderBecomesPathWithoutWarning) {
  const Imported r = convert("base_model: ./models/llama-7b-hf\n");
  EXPECT_EQ(r.at("model.path"), "./models/llama-7b-hf");
  EXPECT_EQ(r.at("model.preset"), "<missing>");
  EXPECT_TRUE(r.warnings_for("base_model").empty());

  // A folder named like a preset's repository is still the local folder.
  const Imported local_gpt2 = convert("base_model: ./gpt2\n");
  EXPECT_EQ(local_gpt2.at("model.path"), "./gpt2");
}

TEST(AxolotlImportTest, UnknownHubIdBecomesPathWithDownloadWarning) {
  const std::string text = "seed: 3\nbase_model: mistralai/Mistral-7B-v0.3\n";
  const Imported r = convert(text);
  EXPECT_EQ(r.at("model.path"), "mistralai/Mistral-7B-v0.3");
  const Diagnostic w = r.warning_for("base_model");
  EXPECT_EQ(w.location.line, 2);
  EXPECT_EQ(w.location.column, 1);
  EXPECT_NE(w.message.find("cannot download"), std::string::npos) << w.message;
  EXPECT_NE(w.message.find("must exist locally"), std::string::npos) << w.message;

  // A fine-tune published elsewhere may have changed the vocabulary: no preset.
  const Imported other_org = convert("base_model: someone/Llama-2-7b-hf\n");
  EXPECT_EQ(other_org.at("model.path"), "someone/Llama-2-7b-hf");
}

TEST(AxolotlImportTest, MissingBaseModelGivesPlaceholderAndWarning) {
  const Imported r = convert("learning_rate: 0.001\n");
  EXPECT_EQ(r.at("model.path"), "model");
  EXPECT_EQ(r.warnings_for("base_model").size(), 1u);
  EXPECT_EQ(r.at("data.train"), "train.jsonl");
  EXPECT_EQ(r.warnings_for("datasets").size(), 1u);
}

// ---- adapter, precision, optimizer, scheduler ----------------------------------------

TEST(AxolotlImportTest, LoadIn4BitMeansQloraAnd8BitMeansLoraWithWarning) {
  const Imported four = convert("base_model: gpt2\nload_in_4bit: true\nlora_target_linear: true\n");
  EXPECT_EQ(four.at("strategy.adapter"), "qlora");
  EXPECT_EQ(four.warnings_for("load_in_4bit").size(), 1u);

  const Imported lora4 = convert("base_model: gpt2\nadapter: lora\nload_in_4bit: true\nlora_target_linear: true\n");
  EXPECT_EQ(lora4.at("strategy.adapter"), "qlora");

  const std::string text = "base_model: gpt2\nadapter: lora\nload_in_8bit: true\nlora_target_linear: true\n";
  const Imported eight = convert(text);
  EXPECT_EQ(eight.at("strategy.adapter"), "lora");
  const Diagnostic w = eight.warning_for("load_in_8bit");
  EXPECT_EQ(w.location.line, 3);
  EXPECT_NE(w.message.find("no 8-bit base weights"), std::string::npos) << w.message;

  const Imported eight_alone = convert("base_model: gpt2\nload_in_8bit: true\nlora_target_linear: true\n");
  EXPECT_EQ(eight_alone.at("strategy.adapter"), "lora");
}

TEST(AxolotlImportTest, LoraTargetsAreCheckedAgainstTheArchitecture) {
  const std::string text =
      "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nlora_target_modules:\n  - q_proj\n  - v_prj\n"
      "  - c_attn\n";
  const Imported r = convert(text);
  EXPECT_EQ(r.list_at("strategy.lora.targets"), std::vector<std::string>{"q_proj"});
  const Diagnostic typo = r.warning_for("lora_target_modules[1]");
  EXPECT_EQ(typo.location.line, 5);
  EXPECT_NE(typo.message.find("did you mean 'v_proj'"), std::string::npos) << typo.message;
  EXPECT_EQ(r.warnings_for("lora_target_modules[2]").size(), 1u);

  const Imported gpt2 = convert("base_model: gpt2\nadapter: lora\nlora_target_modules: [c_attn, c_fc]\n");
  EXPECT_EQ(gpt2.list_at("strategy.lora.targets"), (std::vector<std::string>{"c_attn", "c_fc"}));

  // Neither modules nor linear: Tailor's default (every linear layer), said once.
  const Imported none = convert("base_model: gpt2\nadapter: lora\n");
  EXPECT_EQ(none.at("strategy.lora"), "<missing>");
  EXPECT_EQ(none.warnings_for("adapter").size(), 1u);

  // lora_modules_to_save carries over (checked against the model where the spec loads).
  const Imported whole = convert(
      "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nlora_target_linear: true\n"
      "lora_modules_to_save: [embed_tokens, lm_head]\n");
  EXPECT_EQ(whole.list_at("strategy.lora.modules_to_save"), (std::vector<std::string>{"embed_tokens", "lm_head"}));

  // LoRA settings without an adapter are ignored, one warning each.
  const Imported full = convert("base_model: gpt2\nlora_r: 8\nlora_alpha: 16\n");
  EXPECT_EQ(full.at("strategy.adapter"), "none");
  EXPECT_EQ(full.warnings_for("lora_r").size(), 1u);
  EXPECT_EQ(full.warnings_for("lora_alpha").size(), 1u);
}

TEST(AxolotlImportTest, PrecisionFlagsMapToTailorPrecisions) {
  struct Case {
    const char* flags;
    const char* precision;
  };
  for (const Case& c :
       {Case{"bf16: true\n", "bf16"}, Case{"bf16: auto\n", "bf16"}, Case{"bf16: full\n", "bf16"},
        Case{"fp16: true\n", "fp16"}, Case{"bf16: auto\nfp16: true\n", "fp16"}, Case{"bfloat16: true\n", "pure-bf16"},
        Case{"bf16: false\nfp16: false\n", "auto"}, Case{"", "auto"}}) {
    SCOPED_TRACE(c.flags);
    const Imported r = convert(std::string("base_model: gpt2\n") + c.flags);
    EXPECT_EQ(r.at("strategy.precision"), c.precision);
  }
  const Imported both = convert("base_model: gpt2\nbf16: true\nfp16: true\n");
  EXPECT_EQ(both.at("strategy.precision"), "bf16");
  EXPECT_EQ(both.warnings_for("fp16").size(), 1u);
}

TEST(AxolotlImportTest, OptimizerNamesMapToTailorOptimizers) {
  struct Case {
    const char* name;
    const char* optimizer;
  };
  for (const Case& c : {Case{"adamw_torch", "adamw"}, Case{"adamw_hf", "adamw"}, Case{"adamw_torch_fused", "adamw"},
                        Case{"paged_adamw_32bit", "adamw"}, Case{"adamw_bnb_8bit", "adamw_8bit"},
                        Case{"paged_adamw_8bit", "adamw_8bit"}, Case{"adamw_8bit", "adamw_8bit"}, Case{"sgd", "sgd"},
                        Case{"lion_32bit", "lion"}, Case{"paged_lion_32bit", "lion"}, Case{"lion_8bit", "auto"},
                        Case{"adafactor", "auto"}}) {
    SCOPED_TRACE(c.name);
    const Imported r = convert(std::string("base_model: gpt2\noptimizer: ") + c.name + "\n");
    EXPECT_EQ(r.at("strategy.optimizer"), c.optimizer);
    EXPECT_EQ(r.warnings_for("optimizer").size(), std::string(c.optimizer) == "auto" ? 1u : 0u);
  }
}

TEST(AxolotlImportTest, SchedulersMapOrWarn) {
  struct Case {
    const char* name;
    const char* scheduler;
    std::size_t warnings;
  };
  for (const Case& c : {Case{"cosine", "cosine", 0}, Case{"linear", "linear", 0}, Case{"constant", "constant", 0},
                        Case{"constant_with_warmup", "constant", 0}, Case{"cosine_with_min_lr", "cosine", 1},
                        Case{"one_cycle", "<missing>", 1}, Case{"rex", "<missing>", 1}}) {
    SCOPED_TRACE(c.name);
    const Imported r = convert(std::string("base_model: gpt2\nlr_scheduler: ") + c.name + "\n");
    EXPECT_EQ(r.at("training.scheduler"), c.scheduler);
    EXPECT_EQ(r.warnings_for("lr_scheduler").size(), c.warnings);
  }
}

TEST(AxolotlImportTest, WarmupRatioNeedsMaxStepsAndWarmupIsCapped) {
  const Imported with_steps = convert("base_model: gpt2\nmax_steps: 1000\nwarmup_ratio: 0.1\n");
  EXPECT_EQ(with_steps.at("training.warmup_steps"), "100");
  EXPECT_EQ(with_steps.warnings_for("warmup_ratio").size(), 1u);

  const Imported without = convert("base_model: gpt2\nnum_epochs: 3\nwarmup_ratio: 0.1\n");
  EXPECT_EQ(without.at("training.warmup_steps"), "<missing>");
  EXPECT_NE(without.warning_for("warmup_ratio").message.find("ignored"), std::string::npos);

  const Imported capped = convert("base_model: gpt2\nmax_steps: 20\nwarmup_steps: 100\n");
  EXPECT_EQ(capped.at("training.warmup_steps"), "20");
  EXPECT_EQ(capped.warnings_for("warmup_steps").size(), 1u);
}

TEST(AxolotlImportTest, FractionalEvalAndSaveStepsUseMaxSteps) {
  const Imported r = convert(
      "base_model: gpt2\nmax_steps: 400\neval_steps: 0.25\nsave_steps: 0.5\n"
      "test_datasets:\n  - path: ./eval.jsonl\n    type: completion\n");
  EXPECT_EQ(r.at("training.eval_every"), "100");
  EXPECT_EQ(r.at("checkpoint.every_steps"), "200");
  EXPECT_EQ(r.at("data.eval"), "./eval.jsonl");
}

TEST(AxolotlImportTest, SequenceLengthIsCappedAtThePresetContext) {
  const Imported r = convert("base_model: openai-community/gpt2\nsequence_len: 2048\n");
  EXPECT_EQ(r.at("data.seq_len"), "1024");
  EXPECT_NE(r.warning_for("sequence_len").message.find("1024"), std::string::npos);
}

TEST(AxolotlImportTest, FsdpMapsToZeroStageWithWarning) {
  const std::string text =
      "base_model: meta-llama/Meta-Llama-3-8B\nfsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n"
      "  fsdp_offload_params: true\n  fsdp_state_dict_type: FULL_STATE_DICT\n";
  const Imported r = convert(text);
  EXPECT_EQ(r.at("strategy.zero_stage"), "3");
  EXPECT_EQ(r.at("strategy.offload"), "optimizer_and_params");
  const Diagnostic w = r.warning_for("fsdp");
  EXPECT_EQ(w.location.line, 2);
  EXPECT_NE(w.message.find("zero_stage 3"), std::string::npos) << w.message;
  EXPECT_EQ(r.warnings_for("fsdp_config").size(), 1u);

  const Imported grad_op = convert("base_model: gpt2\nfsdp: [shard_grad_op]\n");
  EXPECT_EQ(grad_op.at("strategy.zero_stage"), "2");
  EXPECT_EQ(grad_op.at("strategy.offload"), "none");
}

// ---- datasets ----------------------------------------------------------------------

TEST(AxolotlImportTest, FirstLocalDatasetIsUsedAndExtrasWarned) {
  const std::string text =
      "base_model: gpt2\ndatasets:\n  - path: tatsu-lab/alpaca\n    type: alpaca\n"
      "  - path: data/notes.txt\n    type: completion\n";
  const Imported r = convert(text);
  EXPECT_EQ(r.at("data.train"), "data/notes.txt");
  EXPECT_EQ(r.at("data.format"), "text");
  EXPECT_EQ(r.at("data.field"), "<missing>");
  const Diagnostic w = r.warning_for("datasets");
  EXPECT_EQ(w.location.line, 2);
  EXPECT_NE(w.message.find("datasets[1]"), std::string::npos) << w.message;
}

TEST(AxolotlImportTest, ParquetAndArrowDatasetsKeepTheirFormat) {
  for (const auto& [file, format] : {std::pair{"data/train.parquet", "parquet"}, std::pair{"data/shard.arrow", "arrow"}}) {
    const Imported r = convert(std::string("base_model: gpt2\ndatasets:\n  - path: ") + file + "\n    type: completion\n");
    EXPECT_EQ(r.at("data.train"), file);
    EXPECT_EQ(r.at("data.format"), format);
    for (const Diagnostic& w : r.result.diagnostics.items()) {
      EXPECT_EQ(w.message.find("convert it to JSONL"), std::string::npos) << w.message;
    }
  }
}

// Axolotl concatenates its datasets: the local ones read alike become
// data.train's list (mix concat); one of another prompt format is left
// out, named in the warning.
TEST(AxolotlImportTest, LocalDatasetsReadAlikeBecomeAListOfDatasets) {
  const std::string text =
      "base_model: gpt2\ndatasets:\n  - path: data/a.jsonl\n    type: completion\n"
      "  - path: data/b.jsonl\n    type: completion\n  - path: data/c.jsonl\n    type: alpaca\n"
      "  - path: data/d.parquet\n    type: completion\n";
  const Imported r = convert(text);
  EXPECT_EQ(r.list_at("data.train"), (std::vector<std::string>{"data/a.jsonl", "data/b.jsonl"}));
  const Diagnostic w = r.warning_for("datasets");
  EXPECT_NE(w.message.find("left out: datasets[2] (\"data/c.jsonl\"), datasets[3] (\"data/d.parquet\")"),
            std::string::npos)
      << w.message;
  EXPECT_NE(w.message.find("and 1 more like it"), std::string::npos) << w.message;
}

TEST(AxolotlImportTest, CustomPromptFormatUsesItsFieldNames) {
  const Imported r = convert(
      "base_model: gpt2\ndatasets:\n  - path: ./qa.jsonl\n    type:\n      field_instruction: question\n"
      "      field_output: answer\n      format: \"Q: {instruction}\\nA:\"\n");
  EXPECT_EQ(r.at("data.prompt_field"), "question");
  EXPECT_EQ(r.at("data.completion_field"), "answer");
  EXPECT_EQ(r.warnings_for("datasets[0].type").size(), 1u);

}

// chat_template datasets become data.chat: messages, with their field
// names, rendered with the model's own template.
TEST(AxolotlImportTest, ChatTemplateDatasetsBecomeChatData) {
  const Imported chat = convert("base_model: gpt2\ndatasets:\n  - path: ./chats.jsonl\n    type: chat_template\n");
  EXPECT_EQ(chat.at("data.train"), "./chats.jsonl");
  EXPECT_EQ(chat.at("data.chat"), "messages");
  EXPECT_TRUE(chat.warnings_for("datasets[0].type").empty());
  const Imported named = convert(
      "base_model: gpt2\nchat_template: chatml\ndatasets:\n  - path: ./c.jsonl\n    type: chat_template\n"
      "    field_messages: conversation\n    message_property_mappings:\n      role: speaker\n      content: text\n"
      "    roles_to_train: [user, assistant]\n    train_on_eos: last\n");
  EXPECT_EQ(named.at("data.chat"), "messages");
  EXPECT_EQ(named.at("data.fields.messages"), "conversation");
  EXPECT_EQ(named.at("data.fields.role"), "speaker");
  EXPECT_EQ(named.at("data.fields.content"), "text");
  EXPECT_EQ(named.at("data.train_on_eos"), "last");
  EXPECT_EQ(named.warnings_for("datasets[0].roles_to_train").size(), 1u);
  EXPECT_EQ(named.warnings_for("chat_template").size(), 1u);
  const Imported sharegpt = convert("base_model: gpt2\ndatasets:\n  - path: ./s.jsonl\n    type: sharegpt\n");
  EXPECT_EQ(sharegpt.at("data.chat"), "sharegpt");
  EXPECT_EQ(sharegpt.warnings_for("datasets[0].type").size(), 1u);
}

// ---- unknown keys, bad values, errors ------------------------------------------------

TEST(AxolotlImportTest, UnknownKeyWarnsAtItsPositionWithSuggestion) {
  const std::string text = "base_model: gpt2\nlearning_rat: 0.001\nmy_custom_flag: 3\n";
  const Imported r = convert(text, "cfg.yml");
  const Diagnostic typo = r.warning_for("learning_rat");
  EXPECT_EQ(typo.location.file, "cfg.yml");
  EXPECT_EQ(typo.location.line, 2);
  EXPECT_EQ(typo.location.column, 1);
  EXPECT_NE(typo.message.find("did you mean 'learning_rate'"), std::string::npos) << typo.message;
  EXPECT_EQ(typo.to_string().rfind("cfg.yml:2:1: warning: learning_rat: ", 0), 0u) << typo.to_string();
  EXPECT_EQ(r.warning_for("my_custom_flag").location.line, 3);
  EXPECT_EQ(r.at("training.lr"), "<missing>");
}

TEST(AxolotlImportTest, BadValuesAreWarnedAndTheSpecStillLoads) {
  // Every mapped key with a value of the wrong shape: one warning each, no errors.
  const std::string text =
      "base_model: [a, b]\nadapter: {x: 1}\nload_in_4bit: maybe\nlora_r: -3\nlora_dropout: 1.5\n"
      "sequence_len: abc\nsample_packing: 7\nmicro_batch_size: 0\ngradient_accumulation_steps: 2.5\n"
      "num_epochs: -1\nmax_steps: many\nlearning_rate: 0\nlr_scheduler: [cosine]\nwarmup_steps: -5\n"
      "warmup_ratio: 2\nweight_decay: -0.1\nmax_grad_norm: x\nseed: -1\neval_steps: {a: 1}\nsave_steps: 0\n"
      "save_total_limit: 0\noptimizer: {name: adamw}\nbf16: sometimes\nfp16: [true]\n"
      "gradient_checkpointing: 3\ndeepspeed: [zero2]\ndatasets: some/dataset\ntest_datasets: 5\n"
      "train_on_inputs: perhaps\nval_set_size: lots\n";
  const Imported r = convert(text);
  EXPECT_FALSE(r.result.diagnostics.has_errors());
  for (const char* key : {"adapter",
                          "load_in_4bit",
                          "sequence_len",
                          "sample_packing",
                          "micro_batch_size",
                          "gradient_accumulation_steps",
                          "num_epochs",
                          "max_steps",
                          "learning_rate",
                          "lr_scheduler",
                          "warmup_steps",
                          "warmup_ratio",
                          "weight_decay",
                          "max_grad_norm",
                          "seed",
                          "eval_steps",
                          "save_steps",
                          "save_total_limit",
                          "optimizer",
                          "bf16",
                          "fp16",
                          "gradient_checkpointing",
                          "deepspeed",
                          "datasets",
                          "test_datasets",
                          "train_on_inputs",
                          "val_set_size"}) {
    EXPECT_EQ(r.warnings_for(key).size(), 1u) << key << "\n" << r.result.diagnostics.to_string();
  }
  EXPECT_EQ(r.at("training"), "<missing>");
  EXPECT_EQ(r.at("strategy.precision"), "auto");
}

TEST(AxolotlImportTest, JobNameIsMadeValid) {
  const Imported r = convert("base_model: gpt2\n", "cfg.yml", "My Llama Run!");
  EXPECT_EQ(r.at("name"), "my-llama-run-");
  EXPECT_EQ(r.warnings_for("name").size(), 1u);

  const Imported from_file = convert("base_model: gpt2\n", "configs/Qlora_Llama2.yml", "");
  EXPECT_EQ(from_file.at("name"), "qlora_llama2");
}

TEST(AxolotlImportTest, UnparseableOrNonMapInputIsAnError) {
  const AxolotlImport broken = import_axolotl("base_model: [unclosed\n", "bad.yml", "job");
  EXPECT_FALSE(broken.ok());
  EXPECT_TRUE(broken.spec_yaml.empty());

  const AxolotlImport list = import_axolotl("- base_model: gpt2\n", "list.yml", "job");
  EXPECT_FALSE(list.ok());
  EXPECT_NE(list.diagnostics.to_string().find("list.yml:1:1: error"), std::string::npos)
      << list.diagnostics.to_string();

  const AxolotlImport empty = import_axolotl("", "empty.yml", "job");
  EXPECT_FALSE(empty.ok());

  const AxolotlImport scalar = import_axolotl("just text\n", "s.yml", "job");
  EXPECT_FALSE(scalar.ok());
}

}  // namespace
}  // namespace tailor::dsl
