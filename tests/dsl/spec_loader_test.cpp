#include "dsl/spec_loader.h"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "dsl/spec_fields.h"
#include "dsl/yaml_tree.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tokenizer_json.h"

namespace tailor::dsl {
namespace {

using tailor::testing::TempDir;

// A valid spec around a model and a data file that exist.
const char* kMinimal = R"(apiVersion: tailor/v1
kind: TrainingJob
model:
  preset: tiny-llama
data:
  train: data/train.txt
)";

class SpecLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_.write("data/train.txt", "hello world\n"); }

  LoadedSpec load(const std::string& text, LoadOptions opts = {}) {
    return load_job_spec(dir_.write("job.yaml", text), opts);
  }

  static std::string errors(const LoadedSpec& s) { return s.diagnostics.to_string(); }

  // A dpo job's spec up to its training section, over one pair.
  std::string pairs_head() {
    dir_.write("data/pairs.jsonl", "{\"prompt\": \"Q:\", \"chosen\": \" yes\", \"rejected\": \" no\"}\n");
    return "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\ndata: {train: data/pairs.jsonl}\n";
  }

  // Each training section refused, its errors naming `want`.
  void expect_refused(const std::string& head, std::span<const std::pair<const char*, const char*>> refused) {
    for (const auto& [training, want] : refused) {
      const LoadedSpec s = load(head + "training: " + training + "\n");
      ASSERT_FALSE(s.ok()) << training;
      EXPECT_NE(errors(s).find(want), std::string::npos) << training << "\n" << errors(s);
    }
  }

  TempDir dir_;
};

// Headroom is a planning policy (strategy.headroom); the older
// resources.headroom still reads, with a warning, and both at once is an
// error at the second.
TEST_F(SpecLoaderTest, HeadroomLivesInStrategyAndTheOldSpellingWarns) {
  LoadedSpec now = load(std::string(kMinimal) + "strategy:\n  headroom: 20%\n");
  ASSERT_TRUE(now.ok()) << errors(now);
  EXPECT_DOUBLE_EQ(now.spec->headroom(), 0.20);
  EXPECT_EQ(now.diagnostics.to_string().find("warning"), std::string::npos);
  LoadedSpec old = load(std::string(kMinimal) + "resources:\n  headroom: 15%\n");
  ASSERT_TRUE(old.ok()) << errors(old);
  EXPECT_DOUBLE_EQ(old.spec->headroom(), 0.15);
  EXPECT_NE(errors(old).find("resources.headroom is now strategy.headroom"), std::string::npos) << errors(old);
  LoadedSpec both = load(std::string(kMinimal) + "strategy:\n  headroom: 20%\nresources:\n  headroom: 15%\n");
  EXPECT_FALSE(both.ok());
  EXPECT_NE(errors(both).find("resources.headroom: set twice"), std::string::npos) << errors(both);
}

TEST_F(SpecLoaderTest, MinimalSpecGetsDocumentedDefaults) {
  LoadedSpec s = load(kMinimal);
  ASSERT_TRUE(s.ok()) << errors(s);
  const JobSpec& j = *s.spec;
  EXPECT_EQ(j.name, "job");  // from the file name
  EXPECT_EQ(j.model.arch.layers, 4);
  EXPECT_EQ(j.data.format, DataFormat::kText);  // from .txt
  EXPECT_EQ(j.data.seq_len, 512);               // min(2048, max_seq_len 512)
  EXPECT_EQ(j.data.train, dir_.file("data/train.txt"));
  EXPECT_EQ(j.training.global_batch_size, 32);
  EXPECT_FALSE(j.training.micro_batch_size.has_value());  // auto
  EXPECT_FALSE(j.strategy.precision.has_value());         // auto
  EXPECT_DOUBLE_EQ(j.headroom(), 0.10);
}

// A preset names a model whose weights are not here: it validates and plans,
// but training it needs model.init: random, where it trained a random model
// in silence before; a folder's weights and an inline architecture need
// nothing.
TEST_F(SpecLoaderTest, APresetWithoutWeightsTrainsOnlyWithInitRandom) {
  LoadedSpec s = load(kMinimal);
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->model.init, ModelInit::kPretrained);
  const Status refused = check_weights(*s.spec);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("model.preset tiny-llama has no weights here: set model.path to its Hugging Face "
                                   "folder, or model.init: random"),
            std::string::npos)
      << refused.message();
  s = load(std::string(kMinimal).replace(std::string(kMinimal).find("  preset: tiny-llama"), 20,
                                         "  preset: tiny-llama\n  init: random"));
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->model.init, ModelInit::kRandom);
  EXPECT_TRUE(check_weights(*s.spec).is_ok());
  s = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  arch: {family: llama, layers: 2, hidden: 64, "
           "intermediate: 172, heads: 4, vocab: 300, max_seq_len: 128}\ndata: {train: data/train.txt}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->model.init, ModelInit::kRandom);  // an inline architecture has no weights to load
  EXPECT_TRUE(check_weights(*s.spec).is_ok());
  s = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: tiny-llama, init: fresh}\ndata: {train: "
           "data/train.txt}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("model.init"), std::string::npos) << errors(s);
}

TEST_F(SpecLoaderTest, ReadsEveryKnobAndUnit) {
  LoadedSpec s = load(std::string(kMinimal) + R"(training:
  global_batch_size: 2k
  micro_batch_size: 8
  max_steps: 1.5k
  lr: 3e-4
strategy:
  precision: pure-bf16
  gradient_checkpointing: 2
  adapter: qlora
  lora: {r: 8, alpha: 16, targets: [q_proj, v_proj]}
  optimizer: adamw_8bit
  zero_stage: 3
  offload: optimizer_and_params
  forbid: [fp16]
  headroom: 15%
resources:
  gpus: [0, 2]
  gpu_memory: 24GiB
  host_memory: 64GB
labels: {team: nlp}
)");
  ASSERT_TRUE(s.ok()) << errors(s);
  const JobSpec& j = *s.spec;
  EXPECT_EQ(j.training.global_batch_size, 2000);
  EXPECT_EQ(*j.training.max_steps, 1500);
  EXPECT_DOUBLE_EQ(j.training.lr, 3e-4);
  EXPECT_EQ(*j.strategy.precision, Precision::kPureBf16);
  EXPECT_EQ(*j.strategy.gradient_checkpointing, 2);
  EXPECT_EQ(*j.strategy.adapter, Adapter::kQlora);
  EXPECT_EQ(j.strategy.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(*j.strategy.zero_stage, 3);
  EXPECT_EQ(*j.resources.gpu_count, 2);
  EXPECT_EQ(j.resources.gpu_memory->count(), 24LL << 30);
  EXPECT_EQ(j.resources.host_memory->count(), 64'000'000'000LL);
  EXPECT_DOUBLE_EQ(j.headroom(), 0.15);
  EXPECT_EQ(j.labels.at("team"), "nlp");
}

TEST_F(SpecLoaderTest, CollectsAllErrorsOfADocumentAtOnce) {
  LoadedSpec s = load(std::string(kMinimal) + R"(training:
  lr: -1
  global_batch_size: 0
  epohcs: 2
strategy:
  lora: {r: 0}
)");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.diagnostics.error_count(), 4u) << errors(s);
  const std::string f = dir_.file("job.yaml");
  EXPECT_EQ(errors(s), f + ":8:7: error: training.lr: expected a number greater than 0, got -1\n" + f +
                           ":9:22: error: training.global_batch_size: expected a positive integer, got 0\n" + f +
                           ":10:3: error: training.epohcs: unknown key; did you mean 'epochs'?\n" + f +
                           ":12:13: error: strategy.lora.r: expected a positive integer, got 0\n");
}

TEST_F(SpecLoaderTest, BatchesAreBoundedSoPlanningStaysFinite) {
  LoadedSpec s = load(std::string(kMinimal) + R"(training:
  global_batch_size: 1000000000000
  micro_batch_size: 2000000
)");
  ASSERT_FALSE(s.ok());
  const std::string f = dir_.file("job.yaml");
  EXPECT_EQ(errors(s), f + ":8:22: error: training.global_batch_size: expected an integer of at most 1048576, got " +
                           "1000000000000\n" + f +
                           ":9:21: error: training.micro_batch_size: expected an integer of at most 1048576, got 2000000\n");
  EXPECT_TRUE(load(std::string(kMinimal) + "training:\n  global_batch_size: 1048576\n").ok());
}

TEST_F(SpecLoaderTest, ExtendsOutsideTheRootIsRefusedUnreadWhenARootIsSet) {
  TempDir elsewhere;
  const std::string secret = elsewhere.write("secret.yaml", "training:\n  lr: not-a-secret-42\n");
  dir_.write("base/ok.yaml", "training:\n  lr: 1e-3\n");
  std::filesystem::create_symlink(secret, dir_.file("base/link.yaml"));
  LoadOptions rooted;
  rooted.read_root = dir_.file("");
  const std::string f = dir_.file("job.yaml");
  for (const std::string& target : {secret, std::string("../") + std::filesystem::path(elsewhere.file("")).parent_path().filename().string() + "/secret.yaml",
                                    std::string("base/link.yaml")}) {
    LoadedSpec s = load("extends: " + target + "\n" + kMinimal, rooted);
    ASSERT_FALSE(s.ok()) << target;
    EXPECT_NE(errors(s).find(f + ":1:10: error: extends: base spec \"" + target + "\" is outside the spec root"),
              std::string::npos)
        << errors(s);
    EXPECT_EQ(errors(s).find("not-a-secret-42"), std::string::npos) << errors(s);
  }
  // Inside the root it is read; without a root (the CLI on one's own files)
  // any file is.
  EXPECT_TRUE(load(std::string("extends: base/ok.yaml\n") + kMinimal, rooted).ok());
  EXPECT_FALSE(load("extends: " + secret + "\n" + kMinimal).ok());  // read: its lr is not a number
  EXPECT_NE(errors(load("extends: " + secret + "\n" + kMinimal)).find("not-a-secret-42"), std::string::npos);
}

TEST_F(SpecLoaderTest, VariablesThatDoubleEachOtherStopAtTheSpecSizeLimit) {
  // 24 variables, each twice the one before: 2^24 copies of the first.
  std::string vars = "vars:\n  v0: xxxxxxxxxxxxxxxx\n";
  for (int i = 1; i <= 24; ++i) {
    vars += "  v" + std::to_string(i) + ": ${v" + std::to_string(i - 1) + "}${v" + std::to_string(i - 1) + "}\n";
  }
  LoadedSpec s = load(vars + kMinimal + "name: ${v24}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.diagnostics.error_count(), 1u) << errors(s);
  EXPECT_NE(errors(s).find("variables expand to more than 1048576 bytes"), std::string::npos) << errors(s);
  EXPECT_LT(s.merged.find("vars")->find("v24")->scalar.size(), 1u << 21);
}

TEST_F(SpecLoaderTest, ExtendsDeepMergesAndResolvesPathsFromTheBaseFile) {
  dir_.write("base/data/base.jsonl", "{\"text\": \"x\"}\n");
  dir_.write("base/common.yaml", R"(apiVersion: tailor/v1
kind: TrainingJob
data:
  train: data/base.jsonl
training:
  lr: 1e-3
  seed: 7
)");
  LoadedSpec s = load(R"(extends: base/common.yaml
model: {preset: tiny-llama}
training:
  lr: 5e-4
)");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_DOUBLE_EQ(s.spec->training.lr, 5e-4);  // child wins
  EXPECT_EQ(s.spec->training.seed, 7);          // inherited
  EXPECT_EQ(s.spec->data.train, dir_.file("base/data/base.jsonl"));
  EXPECT_EQ(s.spec->data.format, DataFormat::kJsonl);
}

TEST_F(SpecLoaderTest, ErrorsInABaseFilePointIntoThatFile) {
  dir_.write("base.yaml", "training:\n  lr: fast\n");
  LoadedSpec s = load(std::string("extends: base.yaml\n") + kMinimal);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(errors(s), dir_.file("base.yaml") + ":2:7: error: training.lr: expected a number, got \"fast\"\n");
}

TEST_F(SpecLoaderTest, CyclicExtendsIsReportedWithTheChain) {
  dir_.write("a.yaml", "extends: b.yaml\n");
  dir_.write("b.yaml", "extends: a.yaml\n");
  LoadedSpec s = load_job_spec(dir_.file("a.yaml"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(errors(s), dir_.file("b.yaml") + ":1:10: error: extends: cyclic extends: a.yaml -> b.yaml -> a.yaml\n");
}

// validate, plan and tailord read the data as the runner will: a data
// file's problem is the spec's error at data.train or data.eval, naming the
// data file's own line.
// data.train as a list: each dataset's path resolved beside the spec, its
// format its own or from its extension, each file checked under its own
// key, and the resolved spec reads back the same.
TEST_F(SpecLoaderTest, SeveralDatasetsResolveCheckAndRoundTrip) {
  dir_.write("data/more.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
  dir_.write("data/raw.md", "a paragraph\n");
  LoadedSpec s = load(std::string(kMinimal).substr(0, std::string(kMinimal).find("data:")) +
                      "data:\n  train:\n    - data/train.txt\n    - {path: data/more.jsonl, weight: 2.5}\n"
                      "    - {path: data/raw.md, format: text}\n  mix: interleave\n  mix_seed: 3\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  const DataSpec& d = s.spec->data;
  ASSERT_EQ(d.sources.size(), 3u);
  EXPECT_EQ(d.train, dir_.file("data/train.txt"));
  EXPECT_EQ(d.sources[0].path, dir_.file("data/train.txt"));
  EXPECT_EQ(d.sources[0].format, DataFormat::kText);
  EXPECT_EQ(d.sources[1].path, dir_.file("data/more.jsonl"));
  EXPECT_EQ(d.sources[1].format, DataFormat::kJsonl);
  EXPECT_DOUBLE_EQ(d.sources[1].weight, 2.5);
  EXPECT_EQ(d.sources[2].format, DataFormat::kText);
  EXPECT_EQ(d.format, DataFormat::kText);  // the first dataset's
  EXPECT_EQ(d.mix, DataMix::kInterleave);
  EXPECT_EQ(d.mix_seed, 3);
  ASSERT_EQ(s.data.size(), 3u);
  EXPECT_EQ(s.data[0].key, "data.train[0]");
  EXPECT_EQ(s.data[1].key, "data.train[1].path");
  EXPECT_EQ(s.data[1].records, 2);
  const std::string resolved = emit_yaml(write_job_spec(*s.spec));
  LoadedSpec again = load(resolved);
  ASSERT_TRUE(again.ok()) << resolved << errors(again);
  EXPECT_EQ(again.spec->data.sources, d.sources);
  EXPECT_EQ(emit_yaml(write_job_spec(*again.spec)), resolved);
  // One dataset writes back as one path, without the mix keys.
  LoadedSpec one = load(kMinimal);
  ASSERT_TRUE(one.ok()) << errors(one);
  const std::string one_resolved = emit_yaml(write_job_spec(*one.spec));
  EXPECT_NE(one_resolved.find("train: " + dir_.file("data/train.txt")), std::string::npos) << one_resolved;
  EXPECT_EQ(one_resolved.find("mix"), std::string::npos) << one_resolved;
}

// Conversations need records in every dataset: a text file among them is
// an error at its own entry.
TEST_F(SpecLoaderTest, ChatDataCannotMixInAFileWithoutRecords) {
  dir_.write("data/chats.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                 "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n");
  dir_.write("data/t.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  LoadedSpec s = load(std::string(kMinimal).substr(0, std::string(kMinimal).find("data:")) +
                      "data:\n  train: [data/chats.jsonl, data/train.txt]\n  chat: messages\n"
                      "  chat_template: data/t.jinja\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("error: data.train[1]: text data has no records of fields"), std::string::npos)
      << errors(s);
}

TEST_F(SpecLoaderTest, DataFilesAreReadAsTheRunnerWillAndTheirErrorsNameFileAndLine) {
  auto spec_with = [](const std::string& data) {
    return "apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  preset: tiny-llama\ndata:\n" + data;
  };
  const std::string array = dir_.write("data/array.jsonl", "[\n  {\"text\": \"a\"},\n  {\"text\": \"b\"}\n]\n");
  LoadedSpec s = load(spec_with("  train: data/array.jsonl\n"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(errors(s), dir_.file("job.yaml") + ":6:10: error: data.train: " + array +
                           ":1: this file is a JSON array, not JSON Lines: convert it with `jq -c '.[]' " + array +
                           " > " + array + "l`, or set data.format: json\n");

  // The same file as json: read, counted, and said. The eval file is read
  // in the same format (json reads JSON Lines too).
  dir_.write("data/eval.jsonl", "{\"text\": \"c\"}\n");
  s = load(spec_with("  train: data/array.jsonl\n  format: json\n  eval: data/eval.jsonl\n"));
  ASSERT_TRUE(s.ok()) << errors(s);
  ASSERT_EQ(s.data.size(), 2u);
  EXPECT_EQ(s.data[0].key, "data.train");
  EXPECT_TRUE(s.data[0].json_array);
  EXPECT_EQ(s.data[0].records, 2);
  EXPECT_EQ(s.data[1].key, "data.eval");
  EXPECT_EQ(s.data[1].records, 1);

  dir_.write("data/folder.txt/x", "");
  s = load(spec_with("  train: data/train.txt\n  eval: data/folder.txt\n"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find(":7:9: error: data.eval: data file \"" + dir_.file("data/folder.txt") +
                           "\" is a directory: name the file itself"),
            std::string::npos)
      << errors(s);

  // Not read: without check_files, in tailor-runner (which reads it itself),
  // or outside the read root (tailord refuses that by name).
  LoadOptions no_files;
  no_files.check_files = false;
  LoadOptions no_data;
  no_data.check_data = false;
  LoadOptions rooted;
  rooted.read_root = dir_.file("elsewhere");
  for (const LoadOptions& o : {no_files, no_data, rooted}) {
    s = load(spec_with("  train: data/array.jsonl\n"), o);
    EXPECT_TRUE(s.ok()) << errors(s);
    EXPECT_TRUE(s.data.empty());
  }
}

// output.merge: auto by default (the runner decides by the adapter); a
// full fine-tune told not to write its model is warned.
TEST_F(SpecLoaderTest, OutputMergeDefaultsByAdapterAndAFullFineTuneWithoutItIsWarned) {
  LoadedSpec s = load(kMinimal);
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_FALSE(s.spec->output.merge.has_value());
  EXPECT_TRUE(s.spec->output.merge_for(/*adapters=*/false));
  EXPECT_FALSE(s.spec->output.merge_for(/*adapters=*/true));
  s = load(std::string(kMinimal) + "output:\n  merge: true\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_TRUE(s.spec->output.merge_for(/*adapters=*/true));
  s = load(std::string(kMinimal) + "strategy:\n  adapter: none\noutput:\n  merge: false\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_NE(errors(s).find(":10:10: warning: output.merge: a full fine-tune with merge: false writes no model/"),
            std::string::npos)
      << errors(s);
}

TEST_F(SpecLoaderTest, MissingBaseSpecIsReportedAtTheExtendsKey) {
  LoadedSpec s = load("extends: nowhere.yaml\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("job.yaml:1:10: error: extends: base spec"), std::string::npos) << errors(s);
  EXPECT_NE(errors(s).find("does not exist"), std::string::npos);
}

TEST_F(SpecLoaderTest, VarsInterpolateEverywhereAndMayUseEarlierVars) {
  LoadedSpec s = load(R"(apiVersion: tailor/v1
kind: TrainingJob
vars:
  folder: data
  file: ${folder}/train.txt
  model: tiny-llama
  rate: 2e-4
name: run-${model}
model: {preset: "${model}"}
data: {train: "${file}"}
training: {lr: "${rate}"}
labels: {note: "cost $${not_a_var}"}
)");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->name, "run-tiny-llama");
  EXPECT_EQ(s.spec->data.train, dir_.file("data/train.txt"));
  EXPECT_DOUBLE_EQ(s.spec->training.lr, 2e-4);
  EXPECT_EQ(s.spec->labels.at("note"), "cost ${not_a_var}");
}

TEST_F(SpecLoaderTest, UnknownVarSuggestsTheClosestOne) {
  LoadedSpec s = load(std::string(kMinimal) + "vars: {learning_rate: 1e-4}\ntraining: {lr: \"${learning_rat}\"}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(errors(s), dir_.file("job.yaml") +
                           ":8:16: error: training.lr: unknown variable ${learning_rat}; did you mean "
                           "'learning_rate'?\n");
}

TEST_F(SpecLoaderTest, OverridesSetAnyKeyPathWithYamlValues) {
  LoadOptions opts;
  opts.overrides = {"training.lr=1e-5", "strategy.forbid=[lora, qlora]", "resources.gpu_memory=16GiB",
                    "vars.unused=1"};
  LoadedSpec s = load(kMinimal, opts);
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_DOUBLE_EQ(s.spec->training.lr, 1e-5);
  EXPECT_EQ(s.spec->strategy.forbid, (std::vector<Technique>{Technique::kLora, Technique::kQlora}));
  EXPECT_EQ(*s.spec->resources.gpu_memory, Bytes::gib(16));
}

TEST_F(SpecLoaderTest, OverrideErrorsNameTheFlag) {
  LoadOptions opts;
  opts.overrides = {"training.lr=abc", "training.micro_batch=4", "novalue"};
  LoadedSpec s = load(kMinimal, opts);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(errors(s),
            "--set novalue: error: expected key.path=value\n"
            "--set training.lr=abc: error: training.lr: expected a number, got \"abc\"\n"
            "--set training.micro_batch=4: error: training.micro_batch: unknown key; did you mean "
            "'micro_batch_size'?\n");
}

TEST_F(SpecLoaderTest, OverrideVarsBeforeInterpolation) {
  LoadOptions opts;
  opts.overrides = {"vars.steps=50"};
  LoadedSpec s = load(std::string(kMinimal) + "vars: {steps: 10}\ntraining: {max_steps: \"${steps}\"}\n", opts);
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(*s.spec->training.max_steps, 50);
}

TEST_F(SpecLoaderTest, UnknownPresetSuggestsCatalogName) {
  LoadedSpec s = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: llama-2-7B}\ndata: {train: data/train.txt}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(errors(s), dir_.file("job.yaml") +
                           ":3:17: error: model.preset: unknown model preset \"llama-2-7B\"; did you mean "
                           "'llama-2-7b'?\n");
}

TEST_F(SpecLoaderTest, MissingDataFileIsAnErrorUnlessFileChecksAreOff) {
  const std::string text = "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\ndata: {train: gone.jsonl}\n";
  LoadedSpec s = load(text);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("job.yaml:4:15: error: data.train: data file"), std::string::npos) << errors(s);
  LoadOptions opts;
  opts.check_files = false;
  EXPECT_TRUE(load(text, opts).ok());
}

TEST_F(SpecLoaderTest, ModelPathReadsHuggingFaceConfig) {
  dir_.write("hf/config.json", R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "intermediate_size": 172, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
    "max_position_embeddings": 128, "rope_theta": 500000.0, "rms_norm_eps": 1e-6})");
  dir_.write("hf/tokenizer.json", testing::byte_level_tokenizer_json());
  LoadedSpec s = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {path: hf}\ndata: {train: data/train.txt}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  const ModelArch& a = s.spec->model.arch;
  EXPECT_EQ(a.family, ModelFamily::kLlama);
  EXPECT_EQ(a.kv_heads, 2);
  EXPECT_EQ(a.vocab, 100);
  EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
  EXPECT_EQ(s.spec->model.path, dir_.file("hf"));
  EXPECT_EQ(s.spec->data.seq_len, 128);
}

// A folder whose tokenizer Tailor cannot read fails validation, naming the
// file, instead of training on byte ids; tokenizer.model beside it wins.
TEST_F(SpecLoaderTest, ModelPathWithATokenizerTailorCannotReadIsAnErrorNamingTheFile) {
  const std::string config = R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
    "vocab_size": 50257, "n_positions": 128})";
  dir_.write("gpt2/config.json", config);
  dir_.write("gpt2/vocab.json", "{}");
  const std::string merges = dir_.write("gpt2/merges.txt", "#version: 0.2\n");
  const char* spec = "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {path: gpt2}\ndata: {train: data/train.txt}\n";
  LoadedSpec s = load(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find(":3:15: error: model.path: " + merges + ": byte-level BPE"), std::string::npos)
      << errors(s);
  dir_.write("llama/config.json", R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "intermediate_size": 172, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 128})");
  dir_.write("llama/tokenizer.json", R"({"model": {"type": "Unigram"}})");
  s = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {path: llama}\ndata: {train: data/train.txt}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("tokenizer.json: model.type \"Unigram\" is not supported"), std::string::npos)
      << errors(s);
  dir_.write("llama/tokenizer.model", "");  // read at training time; only its presence decides here
  EXPECT_TRUE(load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {path: llama}\ndata: {train: data/train.txt}\n").ok());
}

// A folder without tokenizer files trained on byte ids and exported their
// specials (256, 257) for a model whose vocabulary means something else: an
// error now, from random weights too, and for pre-tokenized data (whose
// documents the tokenizer's BOS and EOS frame).
TEST_F(SpecLoaderTest, ModelPathWithoutTokenizerFilesIsAnErrorNamingTheFolder) {
  dir_.write("bare/config.json", R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "intermediate_size": 172, "num_attention_heads": 4, "vocab_size": 968, "max_position_embeddings": 128})");
  dir_.write("data/train.bin", std::string(8, '\0'));
  for (const char* extra : {"", "  init: random\n"}) {
    for (const char* train : {"data/train.txt", "data/train.bin"}) {
      LoadedSpec s = load(std::string("apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  path: bare\n") + extra +
                          "data: {train: " + train + "}\n");
      ASSERT_FALSE(s.ok()) << extra << train;
      EXPECT_NE(errors(s).find(":4:9: error: model.path: model folder " + dir_.file("bare") +
                               " has no tokenizer files (looked for tokenizer.model and tokenizer.json)"),
                std::string::npos)
          << errors(s);
    }
  }
  // An inline architecture and a preset from random weights keep the
  // byte-level tokenizer.
  EXPECT_TRUE(load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: tiny-llama, init: random}\n"
                   "data: {train: data/train.txt}\n")
                  .ok());
}

// Chat data is read with the folder's tokenizer.json, SentencePiece-style
// ones (Llama 2, Mistral, Gemma) included; a tokenizer.model alone is
// refused where data.chat is written, saying what to copy.
TEST_F(SpecLoaderTest, ChatDataNeedsTheFoldersTokenizerJsonNotATokenizerModelAlone) {
  dir_.write("llama2/config.json", R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "intermediate_size": 172, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 128})");
  dir_.write("llama2/tokenizer.model", "");  // read at training time; only its presence decides here
  dir_.write("data/chat.jsonl",
             R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
             "\n");
  dir_.write("chat.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::string spec =
      "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {path: llama2}\n"
      "data:\n  train: data/chat.jsonl\n  chat: messages\n  chat_template: chat.jinja\n";
  LoadedSpec alone = load(spec);
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(errors(alone).find(":6:9: error: data.chat: conversations are read with the model folder's "
                               "tokenizer.json"),
            std::string::npos)
      << errors(alone);
  EXPECT_NE(errors(alone).find("has only " + dir_.file("llama2/tokenizer.model")), std::string::npos) << errors(alone);
  dir_.write("llama2/tokenizer.json", R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"</s>": 0},
    "merges": []}, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
    "split": false}})");
  dir_.write("llama2/tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer", "legacy": false})");
  LoadedSpec with_json = load(spec);
  EXPECT_TRUE(with_json.ok()) << errors(with_json);
  // A class whose pipeline Tailor does not know leaves the tokenizer.model.
  dir_.write("llama2/tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})");
  EXPECT_FALSE(load(spec).ok());
}

TEST_F(SpecLoaderTest, ModelPathWithoutConfigIsAnError) {
  dir_.write("empty/README", "");
  LoadedSpec s = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {path: empty}\ndata: {train: data/train.txt}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("model.path: no config.json"), std::string::npos) << errors(s);
}

TEST_F(SpecLoaderTest, ExplicitArchIsCheckedForConsistency) {
  LoadedSpec s = load(R"(apiVersion: tailor/v1
kind: TrainingJob
model:
  arch: {family: llama, layers: 2, hidden: 100, intermediate: 256, heads: 3, vocab: 10, max_seq_len: 64}
data: {train: data/train.txt}
)");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("hidden (100) must be divisible by heads (3)"), std::string::npos) << errors(s);
}

TEST_F(SpecLoaderTest, PinnedKnobThatForbidExcludesIsAnError) {
  LoadedSpec s = load(std::string(kMinimal) + "strategy:\n  adapter: lora\n  forbid: [adapters]\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(errors(s), dir_.file("job.yaml") +
                           ":8:12: error: strategy.adapter: pinned to use \"adapters\", which strategy.forbid "
                           "excludes\n");
}

TEST_F(SpecLoaderTest, Bf16PinnedOnAGpuWithoutBf16IsAnError) {
  LoadedSpec s = load(std::string(kMinimal) + "strategy: {precision: bf16}\nresources: {gpu_model: T4}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("strategy.precision: bf16 is pinned, but the T4 has no bf16 support"), std::string::npos)
      << errors(s);
}

TEST_F(SpecLoaderTest, BatchSizesMustKeepTheGlobalBatchExact) {
  LoadedSpec s = load(std::string(kMinimal) + "training: {global_batch_size: 30, micro_batch_size: 4}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("must be a multiple of micro_batch_size x GPUs (4 x 1)"), std::string::npos);
}

TEST_F(SpecLoaderTest, CheckpointDirMayNotEscapeTheJobFolder) {
  LoadedSpec s = load(std::string(kMinimal) + "checkpoint: {dir: ../../etc}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("checkpoint.dir: must be a relative folder"), std::string::npos);
}

// The defect: 40,000 label keys took a submission 7 s.
TEST_F(SpecLoaderTest, LabelsAreBoundedInNumberAndShape) {
  std::string many = "labels:\n";
  for (int i = 0; i < 65; ++i) many += "  k" + std::to_string(i) + ": v\n";
  LoadedSpec s = load(std::string(kMinimal) + many);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("labels: 65 labels; at most 64"), std::string::npos) << errors(s);
  s = load(std::string(kMinimal) + "labels: {\"team name\": nlp}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("\"team name\" is not a valid label key"), std::string::npos) << errors(s);
  s = load(std::string(kMinimal) + "labels: {team: \"a,b\"}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("labels.team: may not contain ','"), std::string::npos) << errors(s);
  s = load(std::string(kMinimal) + "labels: {team: " + std::string(257, 'x') + "}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("labels.team: 257 characters; at most 256"), std::string::npos) << errors(s);
  s = load(std::string(kMinimal) + "labels: {team: nlp, app.kubernetes.io/part-of: demo}\n");
  EXPECT_TRUE(s.ok()) << errors(s);
}

TEST_F(SpecLoaderTest, LoraTargetsMustExistInTheArchitecture) {
  LoadedSpec s = load(
      "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\ndata: {train: data/train.txt}\n"
      "strategy:\n  lora:\n    targets: [c_attn, q_proj]\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("job.yaml:7:23: error: strategy.lora.targets[1]: \"q_proj\" is not a linear layer of a "
                           "gpt2 model"),
            std::string::npos)
      << errors(s);
}

// strategy.lora.modules_to_save: the family's embedding and head names, a
// tied matrix by both, and what it is not built or modelled with refused by
// name; a valid list survives the resolved spec.
TEST_F(SpecLoaderTest, ModulesToSaveNameTheFamilysEmbeddingAndHead) {
  const std::string head =
      "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\ndata: {train: data/train.txt}\n";
  LoadedSpec s = load(head + "strategy:\n  lora:\n    modules_to_save: [wte, embed_tokens]\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("job.yaml:7:28: error: strategy.lora.modules_to_save[1]: \"embed_tokens\" is not the "
                           "embedding or the head of a gpt2 model; expected one of wte, lm_head"),
            std::string::npos)
      << errors(s);
  s = load(head + "strategy:\n  lora:\n    modules_to_save: [wte]\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("this model ties wte and lm_head (one matrix): training it changes both, so name both"),
            std::string::npos)
      << errors(s);
  s = load(head + "strategy:\n  zero_stage: 3\n  lora:\n    modules_to_save: [wte, lm_head]\n");
  EXPECT_TRUE(s.ok()) << errors(s);
  s = load(head + "planner: {runtime: hf}\nstrategy:\n  zero_stage: 3\n  lora:\n    modules_to_save: [wte, lm_head]\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("strategy.zero_stage: 3 with strategy.lora.modules_to_save is not modelled for "
                           "planner.runtime hf"),
            std::string::npos)
      << errors(s);
  s = load(head + "training: {method: dpo}\nstrategy:\n  lora:\n    modules_to_save: [wte, lm_head]\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("strategy.lora.modules_to_save: with training.method dpo is not built"), std::string::npos)
      << errors(s);
  s = load(head + "strategy:\n  lora:\n    modules_to_save: [wte, lm_head]\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  LoadedSpec again = load(emit_yaml(write_job_spec(*s.spec)));
  ASSERT_TRUE(again.ok()) << errors(again);
  EXPECT_EQ(again.spec->strategy.lora.modules_to_save, (std::vector<std::string>{"wte", "lm_head"}));
}

// planner.transformers: a version of the hf runtime's transformers, as
// text or as YAML's number, kept through the resolved spec; refused with
// another runtime, as a malformed version, or as one not modelled.
TEST_F(SpecLoaderTest, PlannerTransformersIsTheHfRuntimesVersion) {
  const std::string head =
      "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\ndata: {train: data/train.txt}\n";
  LoadedSpec s = load(head + "planner: {runtime: hf, transformers: 4.47}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->planner.transformers, "4.47");
  LoadedSpec again = load(emit_yaml(write_job_spec(*s.spec)));
  ASSERT_TRUE(again.ok()) << errors(again);
  EXPECT_EQ(again.spec->planner.transformers, "4.47");
  s = load(head + "planner: {runtime: hf, transformers: \"4.48.1\"}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->planner.transformers, "4.48.1");

  s = load(head + "planner: {transformers: 4.47}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("job.yaml:5:25: error: planner.transformers: is the version of planner.runtime hf's "
                           "transformers, but planner.runtime is \"tailor\""),
            std::string::npos)
      << errors(s);
  s = load(head + "planner: {runtime: hf, transformers: 4.x}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("job.yaml:5:38: error: planner.transformers: expected a version major.minor[.patch] such "
                           "as 4.47, got \"4.x\""),
            std::string::npos)
      << errors(s);
  s = load(head + "planner: {runtime: hf, transformers: 3.36}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("planner.transformers: \"3.36\" is not modelled: transformers 4.x and 5.x are"),
            std::string::npos)
      << errors(s);
}

// training.cpo_alpha: simpo's NLL weight, >= 0, refused by name elsewhere;
// label_smoothing is read by simpo too.
TEST_F(SpecLoaderTest, CpoAlphaAndLabelSmoothingAreSimposKeys) {
  const std::string head = pairs_head();
  LoadedSpec s = load(head + "training: {method: simpo, cpo_alpha: 1.0, label_smoothing: 0.1}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->training.cpo_alpha, 1.0);
  EXPECT_EQ(s.spec->training.label_smoothing, 0.1);
  LoadedSpec again = load(emit_yaml(write_job_spec(*s.spec)));
  ASSERT_TRUE(again.ok()) << errors(again);
  EXPECT_EQ(again.spec->training.cpo_alpha, 1.0);
  EXPECT_EQ(again.spec->training.label_smoothing, 0.1);
  s = load(head + "training: {method: dpo, cpo_alpha: 1.0}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("training.cpo_alpha: applies to training.method simpo, not dpo"), std::string::npos)
      << errors(s);
  s = load(head + "training: {method: simpo, cpo_alpha: -1}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("training.cpo_alpha: expected a number of at least 0, got -1"), std::string::npos)
      << errors(s);
}

// data.margin_field: reward's pair margins, kept through the resolved spec
// (and not written when unset), refused by name under other methods.
TEST_F(SpecLoaderTest, MarginFieldIsARewardModelsKey) {
  dir_.write("data/pairs.jsonl", "{\"prompt\": \"Q:\", \"chosen\": \" yes\", \"rejected\": \" no\", \"m\": 1}\n");
  const std::string head = "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\n";
  LoadedSpec s = load(head + "data: {train: data/pairs.jsonl, margin_field: m}\ntraining: {method: reward}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->data.margin_field, "m");
  LoadedSpec again = load(emit_yaml(write_job_spec(*s.spec)));
  ASSERT_TRUE(again.ok()) << errors(again);
  EXPECT_EQ(again.spec->data.margin_field, "m");
  const std::string plain =
      emit_yaml(write_job_spec(*load(head + "data: {train: data/pairs.jsonl}\ntraining: {method: reward}\n").spec));
  EXPECT_EQ(plain.find("margin_field"), std::string::npos) << plain;
  s = load(head + "data: {train: data/pairs.jsonl, margin_field: m}\ntraining: {method: dpo}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("data.margin_field: applies to training.method reward (the pairs' margins in its loss), "
                           "not dpo"),
            std::string::npos)
      << errors(s);
}

// kto's unpaired examples: data.label_field, with the completion field
// defaulting to "completion"; written back and read again; the pairs' own
// fields refused beside it, and the key refused for other methods.
TEST_F(SpecLoaderTest, LabelFieldReadsKtosUnpairedExamples) {
  dir_.write("data/feedback.jsonl", "{\"prompt\": \"Q:\", \"completion\": \" yes\", \"label\": true}\n");
  const std::string head = "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\n";
  LoadedSpec s = load(head + "data: {train: data/feedback.jsonl, label_field: label}\ntraining: {method: kto}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_TRUE(is_labelled(s.spec->data));
  EXPECT_FALSE(is_paired(s.spec->data));
  EXPECT_EQ(s.spec->data.completion_field, "completion");
  EXPECT_EQ(s.spec->data.prompt_field, "prompt");
  EXPECT_EQ(packing_of(s.spec->data), Packing::kNone);
  const std::string written = emit_yaml(write_job_spec(*s.spec));
  EXPECT_EQ(written.find("chosen_field"), std::string::npos) << written;
  LoadedSpec again = load(written);
  ASSERT_TRUE(again.ok()) << errors(again);
  EXPECT_EQ(again.spec->data.label_field, "label");
  EXPECT_EQ(again.spec->data.completion_field, "completion");
  // Pairs: no label_field written back.
  dir_.write("data/pairs.jsonl", "{\"prompt\": \"Q:\", \"chosen\": \" yes\", \"rejected\": \" no\"}\n");
  const LoadedSpec pairs = load(head + "data: {train: data/pairs.jsonl}\ntraining: {method: kto}\n");
  ASSERT_TRUE(pairs.ok()) << errors(pairs);
  const std::string paired = emit_yaml(write_job_spec(*pairs.spec));
  EXPECT_EQ(paired.find("label_field"), std::string::npos) << paired;
  s = load(head +
           "data: {train: data/feedback.jsonl, label_field: label, chosen_field: good}\ntraining: {method: kto}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("data.chosen_field: does not apply to labelled completions (data.label_field)"),
            std::string::npos)
      << errors(s);
  s = load(head + "data: {train: data/feedback.jsonl, label_field: label}\ntraining: {method: dpo}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("data.label_field: applies to training.method kto (its unpaired examples, each a "
                           "labelled completion), not dpo"),
            std::string::npos)
      << errors(s);
  // Paired kto is told where the single completions go.
  s = load(head + "data: {train: data/feedback.jsonl, completion_field: completion}\ntraining: {method: kto}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("(kto reads single completions with data.label_field)"), std::string::npos) << errors(s);
}

// A key the spec's method does not read is told beside the fields' type
// errors (not after they are fixed), once per key; where the method itself
// is not read, nothing is said of the keys it would decide.
TEST_F(SpecLoaderTest, KeysOfAnotherMethodAreToldBesideTypeErrors) {
  dir_.write("data/pairs.jsonl", "{\"prompt\": \"Q:\", \"chosen\": \" yes\", \"rejected\": \" no\"}\n");
  const std::string head = "apiVersion: tailor/v1\nkind: TrainingJob\nmodel: {preset: gpt2}\n";
  LoadedSpec s = load(head +
                      "data: {train: data/pairs.jsonl, margin_field: m}\n"
                      "training: {method: dpo, lr: abc, gamma: x, cpo_alpha: 1}\n");
  ASSERT_FALSE(s.ok());
  const std::string all = errors(s);
  EXPECT_NE(all.find("training.lr: expected a number"), std::string::npos) << all;
  EXPECT_NE(all.find("data.margin_field: applies to training.method reward"), std::string::npos) << all;
  EXPECT_NE(all.find("training.cpo_alpha: applies to training.method simpo, not dpo"), std::string::npos) << all;
  // gamma's own type error, not a second one.
  EXPECT_NE(all.find("training.gamma: expected a number"), std::string::npos) << all;
  EXPECT_EQ(all.find("training.gamma: applies"), std::string::npos) << all;
  // A method that could not be read, or a misspelt method key: the keys
  // wait for it.
  for (const char* training : {"{method: dpx, lr: abc, cpo_alpha: 1}", "{methd: simpo, lr: abc, cpo_alpha: 1}"}) {
    s = load(head + "data: {train: data/pairs.jsonl}\ntraining: " + training + "\n");
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(errors(s).find("applies to training.method"), std::string::npos) << errors(s);
  }
}

// DPO's sigmoid_norm and discopop losses and f-DPO's divergences: kept
// through the resolved spec (written only where read), and refused by name
// where the loss or divergence does not read them.
TEST_F(SpecLoaderTest, DiscopopAndFDivergencesAreDposKeys) {
  const std::string head = pairs_head();
  LoadedSpec s = load(head +
                      "training: {method: dpo, loss_type: discopop, discopop_tau: 0.1, "
                      "f_divergence_type: alpha_divergence, f_alpha_divergence_coef: 0.25}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->training.losses, std::vector<PreferenceLoss>{PreferenceLoss::kDiscopop});
  EXPECT_EQ(s.spec->training.discopop_tau, 0.1);
  EXPECT_EQ(s.spec->training.f_divergence_type, FDivergence::kAlphaDivergence);
  EXPECT_EQ(s.spec->training.f_alpha_divergence_coef, 0.25);
  LoadedSpec again = load(emit_yaml(write_job_spec(*s.spec)));
  ASSERT_TRUE(again.ok()) << errors(again);
  EXPECT_EQ(again.spec->training.discopop_tau, 0.1);
  EXPECT_EQ(again.spec->training.f_alpha_divergence_coef, 0.25);
  // Another dpo job's resolved spec names none of them, and reloads.
  for (const char* loss : {"sigmoid_norm", "nca_pair"}) {
    const LoadedSpec plain = load(head + "training: {method: dpo, loss_type: " + loss + "}\n");
    ASSERT_TRUE(plain.ok()) << errors(plain);
    const std::string yaml = emit_yaml(write_job_spec(*plain.spec));
    EXPECT_EQ(yaml.find("discopop_tau"), std::string::npos) << yaml;
    EXPECT_EQ(yaml.find("f_divergence_type"), std::string::npos) << yaml;
    EXPECT_EQ(yaml.find("f_alpha_divergence_coef"), std::string::npos) << yaml;
    EXPECT_TRUE(load(yaml).ok()) << loss;
  }
  const std::pair<const char*, const char*> refused[] = {
      {"{method: dpo, loss_type: sigmoid, discopop_tau: 0.1}",
       "training.discopop_tau: loss_type sigmoid does not read it (discopop does)"},
      {"{method: dpo, loss_type: nca_pair, f_divergence_type: forward_kl}",
       "training.f_divergence_type: forward_kl applies to the losses of h alone"},
      {"{method: dpo, f_divergence_type: js_divergence, f_alpha_divergence_coef: 0.5}",
       "training.f_alpha_divergence_coef: f_divergence_type js_divergence does not read it (alpha_divergence does)"},
      {"{method: dpo, f_divergence_type: alpha_divergence, f_alpha_divergence_coef: 2}",
       "training.f_alpha_divergence_coef: "},
      {"{method: simpo, f_divergence_type: forward_kl}", "training.f_divergence_type: applies to training.method dpo"},
      {"{method: dpo, loss_type: discopop, discopop_tau: 0}", "training.discopop_tau: "},
  };
  expect_refused(head, refused);
}

// DPOTrainer's options beside its losses: a list of losses with their
// weights (written back as a list, one loss as a name), LD-DPO's ld_alpha
// and WPO's use_weighting, kept through the resolved spec and written only
// where set; each misuse refused by name.
TEST_F(SpecLoaderTest, LossListsLdAlphaAndWeightingAreDposKeys) {
  const std::string head = pairs_head();
  LoadedSpec s = load(head +
                      "training: {method: dpo, loss_type: [sigmoid, bco_pair, sft], loss_weights: [0.8, 0.2, 1.0], "
                      "ld_alpha: 0.3, use_weighting: false}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  const std::vector<PreferenceLoss> mpo = {PreferenceLoss::kSigmoid, PreferenceLoss::kBcoPair, PreferenceLoss::kSft};
  EXPECT_EQ(s.spec->training.losses, mpo);
  EXPECT_EQ(s.spec->training.loss_weights, (std::vector<double>{0.8, 0.2, 1.0}));
  EXPECT_EQ(dsl::loss_weight(s.spec->training, 1), 0.2);
  EXPECT_EQ(s.spec->training.ld_alpha, 0.3);
  EXPECT_FALSE(s.spec->training.use_weighting);
  std::string yaml = emit_yaml(write_job_spec(*s.spec));
  LoadedSpec again = load(yaml);
  ASSERT_TRUE(again.ok()) << errors(again) << yaml;
  EXPECT_EQ(again.spec->training.losses, mpo);
  EXPECT_EQ(again.spec->training.loss_weights, s.spec->training.loss_weights);
  EXPECT_EQ(again.spec->training.ld_alpha, 0.3);
  EXPECT_EQ(yaml.find("use_weighting"), std::string::npos) << yaml;
  s = load(head + "training: {method: dpo, use_weighting: true}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_TRUE(s.spec->training.use_weighting);
  yaml = emit_yaml(write_job_spec(*s.spec));
  EXPECT_NE(yaml.find("use_weighting: true"), std::string::npos) << yaml;
  // One loss is written as its name; nothing else of these appears.
  EXPECT_NE(yaml.find("loss_type: sigmoid\n"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("loss_weights"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("ld_alpha"), std::string::npos) << yaml;
  // The others read no list: kto's one loss stays as it was.
  s = load(head + "training: {method: kto}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->training.losses, std::vector<PreferenceLoss>{PreferenceLoss::kKto});
  const std::pair<const char*, const char*> refused[] = {
      {"{method: dpo, loss_type: [sigmoid, sigmoid]}", "training.loss_type: sigmoid is named twice"},
      {"{method: dpo, loss_type: []}", "training.loss_type: name at least one loss"},
      {"{method: dpo, loss_type: [sigmoid, kto]}", "training.loss_type: kto is a kto loss"},
      {"{method: dpo, loss_type: [sigmoid, sft], loss_weights: [1.0]}",
       "training.loss_weights: 1 weights for 2 losses (loss_type [sigmoid, sft]): give one weight a loss"},
      {"{method: dpo, loss_type: [sigmoid, sft], loss_weights: [1.0, 0]}",
       "training.loss_weights: each weight must be above 0, got 0"},
      {"{method: dpo, loss_type: [sigmoid, nca_pair], f_divergence_type: js_divergence}",
       "training.f_divergence_type: js_divergence applies to the losses of h alone"},
      {"{method: dpo, loss_type: [sigmoid, hinge], discopop_tau: 0.1}",
       "training.discopop_tau: loss_type [sigmoid, hinge] does not read it (discopop does)"},
      {"{method: dpo, loss_type: [sigmoid, sft], use_weighting: true}",
       "training.use_weighting: WPO's weights with loss_type sft are not built"},
      {"{method: dpo, ld_alpha: 1.5}", "training.ld_alpha: "},
      {"{method: kto, loss_type: [kto, apo_zero_unpaired]}", "training.loss_type: kto trains one loss"},
      {"{method: kto, loss_weights: [1.0]}", "training.loss_weights: applies to training.method dpo"},
      {"{method: simpo, ld_alpha: 0.5}", "training.ld_alpha: applies to training.method dpo, not simpo"},
      {"{method: orpo, use_weighting: true}", "training.use_weighting: applies to training.method dpo, not orpo"},
  };
  expect_refused(head, refused);
  // sft with a divergence is allowed, as TRL allows it: it reads no ratio.
  EXPECT_TRUE(load(head + "training: {method: dpo, loss_type: [sigmoid, sft], f_divergence_type: forward_kl}\n").ok());
}

// Keys of TRL's and transformers' arguments name what they are called
// here, instead of the nearest spelling (rpo_alpha's is cpo_alpha, a
// simpo key).
TEST_F(SpecLoaderTest, AnotherTrainersKeyNamesItsTailorEquivalent) {
  const std::string head = pairs_head();
  const std::pair<const char*, const char*> refused[] = {
      {"{method: dpo, rpo_alpha: 1.0}",
       "training.rpo_alpha: unknown key; TRL's rpo_alpha (before 1.0) is loss_type: [sigmoid, sft] with "
       "loss_weights: [1, rpo_alpha] here"},
      {"{method: simpo, simpo_gamma: 0.5}", "training.simpo_gamma: unknown key; TRL's simpo_gamma is gamma here"},
      {"{learning_rate: 1e-4}", "training.learning_rate: unknown key; transformers' learning_rate is lr here"},
      {"{gradient_accumulation_steps: 4}",
       "training.gradient_accumulation_steps: unknown key; accumulation follows from global_batch_size"},
  };
  expect_refused(head, refused);
  const LoadedSpec s = load(head + "training: {method: dpo, rpo_alpha: 1.0}\n");
  EXPECT_EQ(errors(s).find("did you mean"), std::string::npos) << errors(s);
  // Another unknown key still gets its nearest spelling.
  EXPECT_NE(errors(load(head + "training: {lrr: 1e-4}\n")).find("did you mean 'lr'?"), std::string::npos);
}

// training.alpha: AlphaPO's reward shape under simpo, kept through the
// resolved spec, refused elsewhere by name (pointing at LoRA's alpha) and
// outside [-10, 10].
TEST_F(SpecLoaderTest, AlphaIsSimposRewardShape) {
  const std::string head = pairs_head();
  LoadedSpec s = load(head + "training: {method: simpo, alpha: -0.25}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->training.alpha, -0.25);
  LoadedSpec again = load(emit_yaml(write_job_spec(*s.spec)));
  ASSERT_TRUE(again.ok()) << errors(again);
  EXPECT_EQ(again.spec->training.alpha, -0.25);
  EXPECT_EQ(load(head + "training: {method: simpo}\n").spec->training.alpha, 0.0);
  s = load(head + "training: {method: dpo, alpha: 0.25}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("training.alpha: applies to training.method simpo (AlphaPO's reward shape; LoRA's alpha "
                           "is strategy.lora.alpha), not dpo"),
            std::string::npos)
      << errors(s);
  s = load(head + "training: {method: simpo, alpha: 11}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("training.alpha: "), std::string::npos) << errors(s);
  EXPECT_NE(errors(s).find("11"), std::string::npos) << errors(s);
}

// The data readers learn the shape of a record from training.method: pairs
// for every preference method, each row read alone (its own prompt ids) for
// kto, as TRL's KTOTrainer reads them.
TEST_F(SpecLoaderTest, PreferenceMethodsReadPairsAndKtoEachRowAlone) {
  const std::string head = pairs_head();
  for (const auto& [method, pairs, unpaired] :
       {std::tuple{"sft", false, false}, std::tuple{"dpo", true, false}, std::tuple{"orpo", true, false},
        std::tuple{"reward", true, false}, std::tuple{"kto", true, true}}) {
    SCOPED_TRACE(method);
    const std::string text =
        std::string(method) == "sft" ? std::string(kMinimal) : head + "training: {method: " + method + "}\n";
    LoadedSpec s = load(text);
    ASSERT_TRUE(s.ok()) << errors(s);
    EXPECT_EQ(s.spec->data.preference, pairs);
    EXPECT_EQ(s.spec->data.unpaired, unpaired);
  }
}

TEST_F(SpecLoaderTest, ResolvedSpecRoundTripsThroughTheLoader) {
  LoadedSpec s = load(std::string(kMinimal) + "strategy: {gradient_checkpointing: true, zero_stage: 1}\n");
  ASSERT_TRUE(s.ok()) << errors(s);
  const std::string resolved = emit_yaml(write_job_spec(*s.spec));
  LoadedSpec again = load(resolved);
  ASSERT_TRUE(again.ok()) << resolved << errors(again);
  EXPECT_EQ(emit_yaml(write_job_spec(*again.spec)), resolved);
}

// An explicit architecture of each kind reads back from its resolved form:
// counts left to the family's default (head_dim, experts, a window) are
// not written as 0, which the loader would refuse.
TEST_F(SpecLoaderTest, ResolvedArchitecturesRoundTripThroughTheLoader) {
  for (const std::string arch :
       {"{family: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 300, max_seq_len: 128}",
        "{family: qwen3, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 300, max_seq_len: 128}",
        "{family: mixtral, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 300, max_seq_len: 128}",
        "{family: mistral, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 300, max_seq_len: 128, "
        "sliding_window: 32}",
        "{family: gemma2, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 300, max_seq_len: 128, "
        "sliding_window: 32, attn_logit_softcap: 50, final_logit_softcap: 30, query_pre_attn_scalar: 16}",
        "{family: gemma3_text, layers: 6, hidden: 64, intermediate: 128, heads: 4, vocab: 300, max_seq_len: 128, "
        "sliding_window: 32, rope_local_theta: 10000, query_pre_attn_scalar: 16}"}) {
    LoadedSpec s = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  arch: " + arch +
                        "\ndata: {train: data/train.txt, seq_len: 64}\n");
    ASSERT_TRUE(s.ok()) << arch << errors(s);
    const std::string resolved = emit_yaml(write_job_spec(*s.spec));
    LoadedSpec again = load(resolved);
    ASSERT_TRUE(again.ok()) << resolved << errors(again);
    EXPECT_EQ(emit_yaml(write_job_spec(*again.spec)), resolved);
    EXPECT_EQ(again.spec->model.arch.parameter_count(), s.spec->model.arch.parameter_count()) << arch;
  }
}

// Soft-capping and the score scale are Gemma 2's: elsewhere they would be
// trained and exported as a model that has neither.
TEST_F(SpecLoaderTest, Gemma2sCapsOnAnotherFamilyAreErrorsAtTheirKeys) {
  LoadedSpec s = load(
      "apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  arch: {family: llama, layers: 2, hidden: 64, "
      "intermediate: 128, heads: 4, vocab: 300, max_seq_len: 128, attn_logit_softcap: 50, query_pre_attn_scalar: 16}"
      "\ndata: {train: data/train.txt, seq_len: 64}\n");
  ASSERT_FALSE(s.ok());
  const std::string text = errors(s);
  EXPECT_NE(text.find("model.arch.attn_logit_softcap: llama has no attn_logit_softcap (gemma2 and gemma3_text have)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("model.arch.query_pre_attn_scalar"), std::string::npos) << text;
  EXPECT_EQ(s.diagnostics.items().size(), 2u) << text;
}

TEST_F(SpecLoaderTest, TextInputUsesTheGivenNameAndFolder) {
  LoadedSpec s = load_job_spec_text(kMinimal, "<request>", dir_.path().string());
  ASSERT_TRUE(s.ok()) << errors(s);
  EXPECT_EQ(s.spec->data.train, dir_.file("data/train.txt"));
  LoadedSpec bad = load_job_spec_text("kind: [", "<request>", dir_.path().string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.diagnostics.items().at(0).location.file, "<request>");
}

TEST_F(SpecLoaderTest, FilesOverOneMebibyteAreRefusedWithoutParsing) {
  const std::string big = std::string(kMinimal) + "# " + std::string(1 << 20, 'x') + "\n";
  LoadedSpec s = load(big);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.diagnostics.error_count(), 1u);
  EXPECT_NE(errors(s).find("job spec files are limited to 1.00 MiB"), std::string::npos) << errors(s);
}

// A 19 MB spec file is reported at its size, in MiB (only the first MiB and
// a byte are read, so the size comes from the file).
TEST_F(SpecLoaderTest, AFileFarOverTheLimitIsReportedAtItsSizeInMebibytes) {
  const std::string big = std::string(kMinimal) + "# " + std::string(19'000'000, 'x') + "\n";
  LoadedSpec s = load(big);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("file is 18.1 MiB; job spec files are limited to 1.00 MiB"), std::string::npos)
      << errors(s);
}

TEST_F(SpecLoaderTest, ExtendsChainsAreBoundedInDepth) {
  for (int i = 0; i < 20; ++i) {
    dir_.write("chain" + std::to_string(i) + ".yaml", "extends: chain" + std::to_string(i + 1) + ".yaml\n");
  }
  dir_.write("chain20.yaml", kMinimal);
  LoadedSpec s = load_job_spec(dir_.file("chain0.yaml"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(errors(s).find("extends chain deeper than 16 files"), std::string::npos) << errors(s);
}

TEST(SlurmSettingsTest, TimeLimitsAreSlurmsFormats) {
  for (const char* ok : {"90", "90:30", "2:00:00", "1-12", "1-12:30", "3-00:00:00"}) {
    EXPECT_EQ(check_slurm_time_limit(ok), std::nullopt) << ok;
  }
  for (const char* bad : {"", "2h", "1:2:3:4", "-1", "1-", "1-2:3:4:5", ":30", "1 day"}) {
    EXPECT_NE(check_slurm_time_limit(bad), std::nullopt) << bad;
  }
}

TEST(SlurmSettingsTest, ExtraSbatchOptionsCannotTakeWhatTailorSets) {
  EXPECT_EQ(check_sbatch_option("--exclusive"), std::nullopt);
  EXPECT_EQ(check_sbatch_option("--constraint=a100|h100"), std::nullopt);
  EXPECT_NE(check_sbatch_option("-N2"), std::nullopt);
  EXPECT_NE(check_sbatch_option("--mem=1G\n#SBATCH --x"), std::nullopt);
  auto why = check_sbatch_option("--requeue");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("Tailor sets --requeue itself"), std::string::npos);
  why = check_sbatch_option("--partition=debug");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("executor.slurm.partition"), std::string::npos);
}

TEST_F(SpecLoaderTest, TheExecutorSectionIsReadAndCheckedWhereWritten) {
  LoadOptions no_files;
  no_files.check_files = false;
  auto ok = load(
      "apiVersion: tailor/v1\nkind: TrainingJob\nname: t\nmodel: {preset: tiny-llama-byte, init: random}\n"
      "data: {train: x.txt, format: text}\ntraining: {global_batch_size: 8, max_steps: 2}\n"
      "executor:\n  kind: slurm\n  slurm:\n    partition: gpu\n    time_limit: \"30\"\n"
      "    sbatch_options: [--exclusive]\n",
      no_files);
  ASSERT_TRUE(ok.ok()) << ok.diagnostics.to_string();
  EXPECT_EQ(ok.spec->executor.kind, ExecutorKind::kSlurm);
  EXPECT_EQ(ok.spec->executor.slurm.partition, "gpu");
  EXPECT_EQ(ok.spec->executor.slurm.time_limit, "30");
  auto bad = load(
      "apiVersion: tailor/v1\nkind: TrainingJob\nname: t\nmodel: {preset: tiny-llama-byte, init: random}\n"
      "data: {train: x.txt, format: text}\ntraining: {global_batch_size: 8, max_steps: 2}\n"
      "executor:\n  kind: kubernetes\n  slurm:\n    sbatch_options: [--output=/etc/x]\n",
      no_files);
  ASSERT_FALSE(bad.ok());
  const std::string text = bad.diagnostics.to_string();
  EXPECT_NE(text.find("job.yaml:8:9"), std::string::npos) << text;  // kind
  EXPECT_NE(text.find("executor.slurm.sbatch_options"), std::string::npos) << text;
  EXPECT_NE(text.find("Tailor sets --output itself"), std::string::npos) << text;
}

TEST(DeepMergeTest, MapsMergeAndOtherValuesAreReplaced) {
  Diagnostics d;
  auto base = parse_yaml("a: {x: 1, y: [1, 2]}\nb: 1\n", "base", d);
  auto over = parse_yaml("a: {y: [3]}\nc: 2\n", "over", d);
  Node m = deep_merge(*base, *over);
  EXPECT_EQ(m.find("a")->find("x")->scalar, "1");
  ASSERT_EQ(m.find("a")->find("y")->items.size(), 1u);
  EXPECT_EQ(m.find("a")->find("y")->items[0].location.file, "over");
  EXPECT_EQ(m.find("c")->scalar, "2");
}

// Chat data: its keys, checked where they are written; a template is found
// before a job is queued, and the resolved spec writes the keys back only
// for chat data.
TEST_F(SpecLoaderTest, ChatDataKeysAreCheckedWhereTheyAreWritten) {
  dir_.write("data/chat.jsonl", R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
                                "\n");
  dir_.write("chat.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::string head = "apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  preset: tiny-llama\ndata:\n"
                           "  train: data/chat.jsonl\n";
  LoadedSpec ok = load(head + "  chat: messages\n  chat_template: chat.jinja\n  train_on: last_assistant\n"
                              "  train_on_eos: none\n  fields: {tools: functions}\n");
  ASSERT_TRUE(ok.ok()) << errors(ok);
  EXPECT_EQ(ok.spec->data.chat, ChatFormat::kMessages);
  EXPECT_EQ(ok.spec->data.chat_template, dir_.file("chat.jinja"));
  EXPECT_EQ(ok.spec->data.train_on, TrainOn::kLastAssistant);
  EXPECT_EQ(ok.spec->data.train_on_eos, TrainOnEos::kNone);
  EXPECT_EQ(packing_of(ok.spec->data), Packing::kWholeExamples);
  const std::string resolved = emit_yaml(write_job_spec(*ok.spec));
  EXPECT_NE(resolved.find("chat: messages"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("train_on: last_assistant"), std::string::npos) << resolved;
  // The resolved spec (what plans embed and the runner reads) loads again:
  // the keys it writes at their defaults are not taken for asked ones.
  LoadedSpec again = load(resolved);
  EXPECT_TRUE(again.ok()) << errors(again) << resolved;
  LoadedSpec plain = load(kMinimal);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(emit_yaml(write_job_spec(*plain.spec)).find("train_on"), std::string::npos);

  // A preset has no folder: the template must be named.
  LoadedSpec no_template = load(head + "  chat: messages\n");
  EXPECT_NE(errors(no_template).find("data.chat: no chat template: the model has no folder"), std::string::npos)
      << errors(no_template);
  LoadedSpec bad = load(head + "  chat: messages\n  chat_template: chat.jinja\n  field: body\n"
                               "  fields: {turns: x}\n  roles: {bot: assistant}\n");
  EXPECT_NE(errors(bad).find("data.field: does not apply to chat data"), std::string::npos) << errors(bad);
  EXPECT_NE(errors(bad).find("data.fields.turns: not a field of messages records; expected one of messages, tools, "
                             "role, content"),
            std::string::npos)
      << errors(bad);
  EXPECT_NE(errors(bad).find("data.roles: applies to sharegpt data only"), std::string::npos) << errors(bad);
  LoadedSpec not_chat = load(std::string(kMinimal) + "  train_on: all\n");
  EXPECT_NE(errors(not_chat).find("data.train_on: applies to chat data only (set data.chat)"), std::string::npos)
      << errors(not_chat);
  LoadedSpec bad_role = load(head + "  chat: sharegpt\n  chat_template: chat.jinja\n  roles: {bot: robot}\n");
  EXPECT_NE(errors(bad_role).find("data.roles.bot: unknown role \"robot\""), std::string::npos) << errors(bad_role);
  // The records are read as the runner reads them: a turn it would refuse.
  dir_.write("data/bad.jsonl", R"({"messages": [{"role": "user", "content": "hi"}]})" "\n");
  LoadedSpec no_reply = load("apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  preset: tiny-llama\ndata:\n"
                             "  train: data/bad.jsonl\n  chat: messages\n  chat_template: chat.jinja\n");
  EXPECT_NE(errors(no_reply).find("bad.jsonl:1: the conversation has no assistant turn to train"), std::string::npos)
      << errors(no_reply);
}

}  // namespace
}  // namespace tailor::dsl

namespace tailor::dsl {
namespace {

// A tracker's section turns it on by being there (enabled: false turns it
// off); the resolved spec keeps what was said, and leaves the section out
// when nothing was. An MLflow section needs a server to train.
TEST(SpecTrackingTest, ASectionTurnsItsTrackerOnAndTheResolvedSpecKeepsIt) {
  TempDir dir;
  dir.write("data/train.txt", "hello world\n");
  const std::string base =
      "apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  preset: tiny-llama\n  init: random\ndata:\n  train: "
      "data/train.txt\n";
  auto load = [&](const std::string& extra) { return load_job_spec(dir.write("job.yaml", base + extra), {}); };
  LoadedSpec none = load("");
  ASSERT_TRUE(none.ok()) << none.diagnostics.to_string();
  EXPECT_FALSE(none.spec->tracking.any());
  EXPECT_EQ(emit_yaml(write_job_spec(*none.spec)).find("tracking"), std::string::npos);

  LoadedSpec both = load("tracking:\n  tensorboard: {}\n  mlflow:\n    uri: http://127.0.0.1:5000\n    tags: {team: infra}\n");
  ASSERT_TRUE(both.ok()) << both.diagnostics.to_string();
  EXPECT_TRUE(both.spec->tracking.tensorboard.on());
  EXPECT_TRUE(both.spec->tracking.mlflow.on());
  EXPECT_EQ(both.spec->tracking.mlflow.tags.at("team"), "infra");
  EXPECT_TRUE(check_tracking(*both.spec).is_ok());
  // Written and read again: the same trackers.
  const std::string resolved = emit_yaml(write_job_spec(*both.spec));
  EXPECT_NE(resolved.find("uri: http://127.0.0.1:5000"), std::string::npos) << resolved;
  LoadedSpec again = load_job_spec(dir.write("again.yaml", resolved), {});
  ASSERT_TRUE(again.ok()) << again.diagnostics.to_string() << resolved;
  EXPECT_TRUE(again.spec->tracking.tensorboard.on());
  EXPECT_EQ(again.spec->tracking.mlflow.uri, "http://127.0.0.1:5000");

  LoadedSpec off = load("tracking:\n  tensorboard:\n    enabled: false\n");
  ASSERT_TRUE(off.ok()) << off.diagnostics.to_string();
  EXPECT_FALSE(off.spec->tracking.tensorboard.on());
  EXPECT_TRUE(off.spec->tracking.tensorboard.enabled.has_value());

  LoadedSpec no_server = load("tracking:\n  mlflow:\n    experiment: sft\n");
  ASSERT_TRUE(no_server.ok()) << no_server.diagnostics.to_string();
  const Status refused = check_tracking(*no_server.spec);
  EXPECT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("tracking.mlflow.uri: required"), std::string::npos) << refused.message();
}

}  // namespace
}  // namespace tailor::dsl
