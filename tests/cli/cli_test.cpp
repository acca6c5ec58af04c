#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/job_view.h"
#include "core/units.h"
#include "dsl/catalog.h"
#include "dsl/spec_loader.h"
#include "platform/hardware_detect.h"
#include "platform/process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tokenizer_json.h"

namespace tailor::cli {
namespace {

// The calibration store's machine for CPU training on this machine.
std::string cli_cpu_machine() {
  const std::string model = platform::detect_cpu_model();
  return model.empty() ? "cpu" : "cpu: " + model;
}

namespace fs = std::filesystem;
using tailor::testing::TempDir;

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

CliRun tailor(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run_tailor(args, {out, err});
  return {code, out.str(), err.str()};
}

// Runs `req` (its log_path set) to its end: the exit code (-1 when it was
// not started or was killed) and its stdout and stderr.
std::pair<int, std::string> run_logged(const platform::LaunchRequest& req) {
  auto child = platform::launch_process(req);
  EXPECT_TRUE(child.is_ok()) << child.status().to_string();
  auto exit = child.is_ok() ? platform::wait_child(child->pid) : Result<platform::ProcessExit>(child.status());
  std::ifstream log(req.log_path);
  std::stringstream text;
  text << log.rdbuf();
  return {exit.is_ok() ? exit->code : -1, text.str()};
}

std::string example(const char* name) { return (fs::path(TAILOR_SOURCE_DIR) / "configs/examples" / name).string(); }
std::string spec_case(const char* name) { return (fs::path(TAILOR_SOURCE_DIR) / "tests/dsl/cases" / name).string(); }

TEST(CliTest, EveryCommandHasHelp) {
  for (const char* cmd : {"validate", "plan", "run", "schema", "import", "catalog"}) {
    CliRun r = tailor({cmd, "--help"});
    EXPECT_EQ(r.code, kExitOk) << cmd;
    EXPECT_NE(r.out.find("usage: tailor " + std::string(cmd)), std::string::npos) << cmd;
  }
  CliRun top = tailor({"--help"});
  EXPECT_EQ(top.code, kExitOk);
  EXPECT_NE(top.out.find("validate"), std::string::npos);
  EXPECT_EQ(tailor({}).code, kExitUsage);
}

TEST(CliTest, UnknownCommandAndOptionSuggestTheNearestOne) {
  CliRun r = tailor({"valdate"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("did you mean 'validate'?"), std::string::npos) << r.err;
  CliRun opt = tailor({"validate", "--resolve", example("tiny-cpu.yaml")});
  EXPECT_EQ(opt.code, kExitUsage);
  EXPECT_NE(opt.err.find("did you mean --resolved?"), std::string::npos) << opt.err;
}

TEST(CliTest, ValidateSucceedsOnExamplesAndSummarisesThem) {
  CliRun r = tailor({"validate", example("tiny-cpu.yaml"), example("gpt2-t4.yaml")});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("tiny-cpu.yaml: ok: tiny-cpu: tiny-llama-byte"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpt2 (124M params)"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST(CliTest, ValidateReportsEveryErrorAndExitsOne) {
  CliRun r = tailor({"validate", example("tiny-cpu.yaml"), spec_case("unknown-key.yaml")});
  EXPECT_EQ(r.code, kExitInvalid);
  EXPECT_NE(r.err.find("unknown-key.yaml:12:3: error: training.micro_batch: unknown key; did you mean "
                       "'micro_batch_size'?"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("unknown-key.yaml: invalid (3 errors)"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("tiny-cpu.yaml: ok"), std::string::npos);  // the valid file is still reported
}

TEST(CliTest, ValidateAppliesSetOverrides) {
  CliRun r = tailor({"validate", "--set", "training.max_steps=7", example("tiny-cpu.yaml")});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("7 steps"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("tiny-cpu.yaml:20:17: warning: training.warmup_steps: warmup_steps (20) exceeds max_steps (7)"),
            std::string::npos)
      << r.err;
  CliRun bad = tailor({"validate", "--set", "training.lr=-1", example("tiny-cpu.yaml")});
  EXPECT_EQ(bad.code, kExitInvalid);
  EXPECT_NE(bad.err.find("--set training.lr=-1: error: training.lr: expected a number greater than 0"),
            std::string::npos)
      << bad.err;
}

TEST(CliTest, ResolvedSpecIsAValidSpecItself) {
  CliRun r = tailor({"validate", "--resolved", example("llama2-7b-qlora-24gb.yaml")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("preset: llama-2-7b"), std::string::npos);
  EXPECT_EQ(r.out.find("extends"), std::string::npos);  // merged away
  EXPECT_EQ(r.out.find("${"), std::string::npos);       // interpolated
  TempDir dir;
  const std::string path = dir.write("resolved.yaml", r.out);
  CliRun again = tailor({"validate", path});
  EXPECT_EQ(again.code, kExitOk) << again.err << r.out;
}

TEST(CliTest, JsonOutputIsMachineReadable) {
  CliRun r = tailor({"validate", "--output", "json", spec_case("out-of-range.yaml")});
  EXPECT_EQ(r.code, kExitInvalid);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["valid"].get<bool>());
  const auto& d = j["files"][0]["diagnostics"];
  ASSERT_EQ(d.size(), 9u);
  EXPECT_EQ(d[0]["line"], 8);
  EXPECT_EQ(d[0]["column"], 21);
  EXPECT_EQ(d[0]["path"], "training.micro_batch_size");
  EXPECT_EQ(d[0]["severity"], "error");

  CliRun ok = tailor({"validate", "--output=json", "--resolved", example("tiny-cpu.yaml")});
  ASSERT_EQ(ok.code, kExitOk) << ok.err;
  const auto spec = nlohmann::json::parse(ok.out)["files"][0]["spec"];
  EXPECT_EQ(spec["training"]["max_steps"], 200);
  EXPECT_EQ(spec["strategy"]["precision"], "auto");
}

// validate reads the data as the runner will: it says what it read, and a
// file the runner would refuse makes the spec invalid, naming the line.
TEST(CliTest, ValidateReadsTheDataAndSaysWhatItHolds) {
  CliRun r = tailor({"validate", "--output", "json", example("tiny-cpu.yaml")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto data = nlohmann::json::parse(r.out)["files"][0]["data"];
  ASSERT_EQ(data.size(), 1u);
  EXPECT_EQ(data[0]["key"], "data.train");
  EXPECT_EQ(data[0]["format"], "text");
  // Paragraphs counted here independently: runs of lines with content.
  std::ifstream corpus(std::string(TAILOR_SOURCE_DIR) + "/configs/data/tiny-corpus.txt");
  std::int64_t paragraphs = 0;
  bool in_paragraph = false;
  for (std::string line; std::getline(corpus, line);) {
    const bool blank = line.find_first_not_of(" \t\r") == std::string::npos;
    if (!blank && !in_paragraph) ++paragraphs;
    in_paragraph = !blank;
  }
  EXPECT_GT(paragraphs, 10);
  EXPECT_EQ(data[0]["records"], paragraphs);
  EXPECT_TRUE(data[0]["all_checked"].get<bool>());
  CliRun text = tailor({"validate", example("tiny-cpu.yaml")});
  EXPECT_NE(text.out.find("; data.train: " + std::to_string(paragraphs) + " records, "), std::string::npos) << text.out;

  TempDir dir;
  dir.write("data.jsonl", "{\"text\": \"a\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  const std::string spec = dir.write("job.yaml", "apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  preset: tiny-llama\n"
                                                 "data:\n  train: data.jsonl\n");
  CliRun chat = tailor({"validate", spec});
  EXPECT_EQ(chat.code, kExitInvalid);
  EXPECT_NE(chat.err.find("job.yaml:6:10: error: data.train: " + dir.file("data.jsonl") +
                          ":2: missing field \"text\": this record is a conversation"),
            std::string::npos)
      << chat.err;
  EXPECT_EQ(tailor({"validate", "--no-check-files", spec}).code, kExitOk);
}

TEST(CliTest, SchemaIsJson) {
  CliRun r = tailor({"schema"});
  ASSERT_EQ(r.code, kExitOk);
  EXPECT_EQ(nlohmann::json::parse(r.out)["title"], "Tailor TrainingJob");
  EXPECT_EQ(tailor({"schema", "extra"}).code, kExitUsage);
}

TEST(CliTest, ImportWritesAtomicallyAndRefusesToOverwrite) {
  TempDir dir;
  const std::string in = dir.write("my-run.yml", "base_model: NousResearch/Llama-2-7b-hf\nadapter: qlora\n"
                                                 "load_in_4bit: true\nlora_r: 8\nsequence_len: 1024\n"
                                                 "micro_batch_size: 2\ngradient_accumulation_steps: 4\n"
                                                 "learning_rate: 0.0002\nnum_epochs: 1\nbf16: true\n"
                                                 "datasets:\n  - path: data.jsonl\n    type: completion\n");
  const std::string out = dir.file("my-run.yaml");
  CliRun r = tailor({"import", "axolotl", in, "-o", out});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  ASSERT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  dsl::LoadOptions opts;
  opts.check_files = false;
  const dsl::LoadedSpec s = dsl::load_job_spec(out, opts);
  ASSERT_TRUE(s.ok()) << s.diagnostics.to_string();
  EXPECT_EQ(s.spec->name, "my-run");
  EXPECT_EQ(s.spec->model.preset, "llama-2-7b");
  EXPECT_EQ(*s.spec->strategy.adapter, dsl::Adapter::kQlora);
  EXPECT_EQ(s.spec->training.global_batch_size, 8);  // 2 x 4 accumulation
  CliRun again = tailor({"import", "axolotl", in, "-o", out});
  EXPECT_EQ(again.code, kExitInvalid);
  EXPECT_NE(again.err.find("file exists"), std::string::npos);
  EXPECT_EQ(tailor({"import", "axolotl", in, "-o", out, "--force"}).code, kExitOk);
  EXPECT_EQ(tailor({"import", "unsloth", in}).code, kExitUsage);
}

TEST(CliTest, PlanPrintsStrategyMemoryDecisionsAndAlternatives) {
  CliRun r = tailor({"plan", "--gpus", "1x24GiB", example("llama2-7b-qlora-24gb.yaml")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* part : {"Strategy (fits)", "Memory per GPU", "optimizer states", "activations", "budget",
                           "Throughput (estimate)", "Decisions", "1. Does the job fit as written", "Alternatives",
                           "\nData: data.train "}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
}

TEST(CliTest, PlanExplainTabulatesTheAlternativesMemoryAndSpeed) {
  CliRun r = tailor({"plan", "--explain", "--gpus", "1xT4", example("llama2-7b-qlora-24gb.yaml")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* part : {"The chosen plan and the best of each other kind", "PER GPU", "SPARE", "TOKENS/S",
                           "chosen"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
}

// `tailor plan` and `tailor run` plan through one function: what plan says
// does not fit (a full fine-tune of 7B on a T4 without parameter offload),
// run refuses with the same shortfalls before starting anything.
TEST(CliTest, PlanAndRunAgreeOnWhatDoesNotFit) {
  TempDir dir;
  const std::vector<std::string> flags = {"--gpus",
                                          "1xT4,host=64GiB",
                                          "--set",
                                          "strategy.forbid=[adapters, offload_params]",
                                          "--set",
                                          "model.init=random",
                                          "--no-check-files",
                                          example("llama2-7b-qlora-24gb.yaml")};
  std::vector<std::string> plan = {"plan", "--output", "json"};
  plan.insert(plan.end(), flags.begin(), flags.end());
  CliRun p = tailor(plan);
  ASSERT_EQ(p.code, kExitNoFit) << p.out << p.err;
  const auto j = nlohmann::json::parse(p.out);
  const std::string device = Bytes(j["shortfall_bytes"].get<std::int64_t>()).to_string();
  const std::string host = Bytes(j["host_shortfall_bytes"].get<std::int64_t>()).to_string();
  std::vector<std::string> run = {"run", "--out", dir.file("run")};
  run.insert(run.end(), flags.begin(), flags.end());
  CliRun r = tailor(run);
  EXPECT_EQ(r.code, kExitNoFit) << r.err;
  EXPECT_NE(r.err.find("short by " + device + " per GPU and " + host + " of host RAM"), std::string::npos)
      << device << ", " << host << "\n" << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/plan.json")));
}

TEST(CliTest, PlanJsonIsThePlanDocument) {
  CliRun r = tailor({"plan", "--output", "json", "--gpus", "2xA6000", "--set", "resources.host_memory=256GiB",
                     example("llama2-70b-2xa6000.yaml")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["hardware"]["source"], "--gpus 2xA6000");
  EXPECT_EQ(j["hardware"]["num_gpus"], 2);
  // One rank per GPU, and nothing better that the runner lacks.
  EXPECT_EQ(j["strategy"]["num_gpus"], 2);
  EXPECT_TRUE(j["preferred_if_executable"].is_null()) << j["preferred_if_executable"].dump(1);
  // A full fine-tune of 70B on two A100s fits only with the parameters
  // offloaded too, with the host bytes that takes.
  CliRun full = tailor({"plan", "--output", "json", "--gpus", "2xA100-80GB,host=1TiB", "--set", "strategy.adapter=none",
                        example("llama2-70b-2xa6000.yaml")});
  ASSERT_EQ(full.code, kExitOk) << full.err;
  const auto f = nlohmann::json::parse(full.out);
  EXPECT_EQ(f["strategy"]["offload"], "optimizer_and_params");
  EXPECT_GT(f["memory"]["host_total"].get<double>(), 70e9 * 2) << "the bf16 weights at least";
  // Decisions are data, with the prose derived from them.
  ASSERT_GE(j["decisions"].size(), 3u);
  for (const auto& d : j["decisions"]) {
    for (const char* key : {"step", "question", "verdict", "fits", "bytes_needed", "budget", "saved", "reason",
                            "change", "answer", "action"}) {
      EXPECT_TRUE(d.contains(key)) << key << " in " << d.dump();
    }
  }
  EXPECT_EQ(j["decisions"][1]["step"], "precision");
  EXPECT_EQ(j["decisions"].back()["verdict"], "chosen");
  EXPECT_EQ(j["decisions"].back()["bytes_needed"], j["memory"]["per_gpu"]["total"]);
}

// A prediction for another stack's ZeRO-3 says it is FSDP1's, whose root
// unit stays whole through the step, and how much that is; tailor-runner's
// own plans have no such unit.
TEST(CliTest, AnotherStacksZeroThreePlanNamesFsdp1sGatheredRootUnit) {
  TempDir dir;
  const auto spec = [&](const char* runtime) {
    return dir.write(std::string(runtime) + ".yaml",
                     "apiVersion: tailor/v1\nkind: TrainingJob\nname: root\nmodel: {preset: llama-2-7b}\n"
                     "data: {train: none.txt, seq_len: 1024}\ntraining: {global_batch_size: 8}\n"
                     "strategy: {adapter: lora, zero_stage: 3}\nplanner: {runtime: " +
                         std::string(runtime) + "}\nresources: {gpus: 2, gpu_memory: 24GiB}\n");
  };
  CliRun hf = tailor({"plan", "--no-check-files", spec("hf")});
  ASSERT_EQ(hf.code, kExitOk) << hf.err;
  EXPECT_NE(hf.out.find("ZeRO-3 as FSDP1 runs it"), std::string::npos) << hf.out;
  // The embedding, the final norm and the untied head, in bf16.
  const std::int64_t root = (2 * 32000 * 4096 + 4096) * 2;
  CliRun json = tailor({"plan", "--output", "json", "--no-check-files", spec("hf")});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["memory"]["fsdp1_root_unit_per_gpu"], root) << json.out;

  CliRun own = tailor({"plan", "--output", "json", "--no-check-files", spec("tailor")});
  ASSERT_EQ(own.code, kExitOk) << own.err;
  EXPECT_FALSE(nlohmann::json::parse(own.out)["memory"].contains("fsdp1_root_unit_per_gpu")) << own.out;
  EXPECT_EQ(tailor({"plan", "--no-check-files", spec("tailor")}).out.find("FSDP1"), std::string::npos);
}

// planner.transformers: a plan for transformers 4.x says what that version
// keeps beyond 5.x and predicts more for the same strategy (reentrant
// checkpoints held under FSDP1 with adapters; 4.46-4.48's shifted logits).
TEST(CliTest, APlanForTransformersFourSaysWhatItKeeps) {
  TempDir dir;
  // A 70B's QLoRA under ZeRO-3 on two GPUs (deep enough that the held
  // inputs outgrow the loss's buffers), or a 7B's LoRA on one GPU.
  const auto spec = [&](const std::string& name, const std::string& transformers, bool sharded) {
    return dir.write(name + ".yaml", "apiVersion: tailor/v1\nkind: TrainingJob\nname: " + name +
                                         "\nmodel: {preset: " + (sharded ? "llama-2-70b" : "llama-2-7b") +
                                         "}\n"
                                         "data: {train: none.txt, seq_len: 4096}\n"
                                         "training: {global_batch_size: 8, micro_batch_size: 1}\n"
                                         "strategy: {adapter: " +
                                         (sharded ? "qlora" : "lora") + ", zero_stage: " + (sharded ? "3" : "0") +
                                         ", gradient_checkpointing: true, precision: pure-bf16, offload: none}\n"
                                         "planner: {runtime: hf" +
                                         (transformers.empty() ? "" : ", transformers: " + transformers) +
                                         "}\nresources: {gpus: " + (sharded ? "2" : "1") + ", gpu_memory: 80GiB}\n");
  };
  const auto plan = [&](const std::string& file) {
    CliRun run = tailor({"plan", "--output", "json", "--no-check-files", file});
    EXPECT_EQ(run.code, kExitOk) << run.err;
    return nlohmann::json::parse(run.out.empty() ? "{}" : run.out);
  };
  const auto total = [](const nlohmann::json& j) { return j["memory"]["per_gpu"]["total"].get<std::int64_t>(); };
  // Held checkpoints: under ZeRO-3 with adapters, from 4.0 on.
  const nlohmann::json five = plan(spec("five", "", true)), four = plan(spec("four", "4.40", true));
  EXPECT_EQ(four["strategy"], five["strategy"]);
  EXPECT_GT(total(four), total(five));
  EXPECT_FALSE(five["memory"].contains("transformers"));
  EXPECT_EQ(four["memory"]["transformers"], "4.40");
  // The shifted logits' copy: 4.46 to 4.48 only, sharded or not.
  const nlohmann::json one = plan(spec("one", "", false)), before = plan(spec("before", "4.40", false)),
                       copying = plan(spec("copying", "4.47", false));
  EXPECT_EQ(copying["strategy"], one["strategy"]);
  EXPECT_EQ(total(before), total(one));
  EXPECT_GT(total(copying), total(one));

  CliRun text = tailor({"plan", "--no-check-files", spec("text", "4.47", true)});
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_NE(text.out.find("Runtime: hf, transformers 4.47"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("transformers 4.47 keeps every checkpointed layer input and its gradient until backward "
                          "ends"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("; and an fp32 copy of the shifted logits in its loss"), std::string::npos) << text.out;
  EXPECT_EQ(tailor({"plan", "--no-check-files", spec("plain", "", true)}).out.find(" keeps every checkpointed"),
            std::string::npos);
}

// A dpo plan names its losses with their weights, LD-DPO's ld_alpha and
// WPO's weights, and counts WPO's extra pass of the head in its time (the
// same strategy, a longer step).
TEST(CliTest, ADpoPlanNamesItsLossesAndTimesWposHeadPass) {
  TempDir dir;
  dir.write("pairs.jsonl", "{\"prompt\": \"Q:\", \"chosen\": \" yes\", \"rejected\": \" no\"}\n");
  const auto spec = [&](const std::string& name, const std::string& training) {
    return dir.write(name + ".yaml", "apiVersion: tailor/v1\nkind: TrainingJob\nname: " + name +
                                         "\nmodel: {preset: llama-3.2-1b}\n"
                                         "data: {train: pairs.jsonl, seq_len: 1024}\n"
                                         "training: {method: dpo, global_batch_size: 8, micro_batch_size: 2" +
                                         training +
                                         "}\nstrategy: {adapter: lora, precision: bf16}\n"
                                         "resources: {gpus: 1, gpu_memory: 24GiB}\n");
  };
  const auto plan = [&](const std::string& file) {
    CliRun run = tailor({"plan", "--output", "json", file});
    EXPECT_EQ(run.code, kExitOk) << run.err;
    return nlohmann::json::parse(run.out.empty() ? "{}" : run.out);
  };
  const std::string plain = spec("plain", ""), wpo = spec("wpo", ", use_weighting: true");
  const nlohmann::json a = plan(plain), b = plan(wpo);
  EXPECT_FALSE(a["strategy"].contains("head_pass"));
  EXPECT_EQ(b["strategy"]["head_pass"], true);
  EXPECT_GT(b["throughput"]["compute_seconds"].get<double>(), a["throughput"]["compute_seconds"].get<double>());
  CliRun text = tailor({"plan", spec("mpo",
                                     ", loss_type: [sigmoid, bco_pair, sft], loss_weights: [0.8, 0.2, 1], "
                                     "ld_alpha: 0.3, use_weighting: false")});
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_NE(text.out.find("dpo (sigmoid x 0.8 + bco_pair x 0.2 + sft x 1, ld_alpha 0.3, beta 0.1)"), std::string::npos)
      << text.out;
  text = tailor({"plan", wpo});
  EXPECT_NE(text.out.find("dpo (sigmoid, WPO weights, beta 0.1): micro-batches of pairs, two rows each; one more pass "
                          "of the head over the completions, without gradients"),
            std::string::npos)
      << text.out;
}

TEST(CliTest, PlanExitCodesSayFitsNoFitBadSpecBadFlag) {
  EXPECT_EQ(tailor({"plan", example("tiny-cpu.yaml")}).code, kExitOk);
  CliRun nofit = tailor({"plan", "--gpus", "1xT4", "--set", "strategy.forbid=[adapters, offload_optimizer]",
                         example("llama2-70b-2xa6000.yaml")});
  EXPECT_EQ(nofit.code, kExitNoFit) << nofit.out << nofit.err;
  EXPECT_NE(nofit.out.find("Does not fit. The closest strategy tailor-runner can run is short by"), std::string::npos) << nofit.out;
  CliRun bad = tailor({"plan", "--set", "training.lr=-1", example("tiny-cpu.yaml")});
  EXPECT_EQ(bad.code, kExitInvalid);
  EXPECT_NE(bad.err.find("tiny-cpu.yaml: invalid (1 error)\n"), std::string::npos) << bad.err;
  EXPECT_EQ(tailor({"plan", spec_case("out-of-range.yaml")}).code, kExitInvalid);
  // Without its folder a path model has no shape: an error, not a plan of nothing.
  TempDir dir;
  CliRun nowhere = tailor({"plan", "--no-check-files", "--gpus", "1xT4",
                           dir.write("x.yaml", "apiVersion: tailor/v1\nkind: TrainingJob\nname: x\nmodel: {path: "
                                               "/nowhere/model}\ndata: {train: a.txt}\n")});
  EXPECT_EQ(nowhere.code, kExitInvalid);
  EXPECT_NE(nowhere.err.find("model.path \"/nowhere/model\" is not here"), std::string::npos) << nowhere.err;
  CliRun badflag = tailor({"plan", "--gpus", "3xB9000", example("tiny-cpu.yaml")});
  EXPECT_EQ(badflag.code, kExitUsage);
  EXPECT_NE(badflag.err.find("unknown GPU"), std::string::npos) << badflag.err;
  CliRun several = tailor({"plan", "--gpus", "2xA100", example("tiny-cpu.yaml")});
  EXPECT_EQ(several.code, kExitUsage);
  EXPECT_NE(several.err.find("\"A100\" names several GPUs: say which, A100-40 or A100-80"), std::string::npos)
      << several.err;
  EXPECT_EQ(tailor({"plan", "--gpus", "2xA100-80GB", example("llama2-7b-qlora-24gb.yaml")}).code, kExitOk);
}

// Quick planning: --model with a preset or a model folder, no YAML; the
// flags say what a spec would, and the plan is the one the same spec gives.
TEST(CliTest, PlanWithModelNeedsNoSpecFile) {
  CliRun quick = tailor({"plan", "--output", "json", "--model", "llama-2-7b", "--gpus", "1x24GiB", "--adapter",
                         "qlora", "--seq-len", "1024", "--batch", "8"});
  ASSERT_EQ(quick.code, kExitOk) << quick.err;
  const auto j = nlohmann::json::parse(quick.out);
  EXPECT_EQ(j["strategy"]["adapter"], "qlora");
  EXPECT_EQ(j["job"]["seq_len"], 1024);
  EXPECT_EQ(j["job"]["global_batch_size"], 8);
  EXPECT_EQ(j["job"]["parameters"], 6738415616);

  TempDir dir;
  const std::string spec = dir.write("same.yaml",
                                     "apiVersion: tailor/v1\nkind: TrainingJob\nname: llama-2-7b\nmodel: {preset: "
                                     "llama-2-7b}\ndata: {train: none.txt, seq_len: 1024}\ntraining: "
                                     "{global_batch_size: 8}\nstrategy: {adapter: qlora}\n");
  CliRun same = tailor({"plan", "--output", "json", "--no-check-files", "--gpus", "1x24GiB", spec});
  ASSERT_EQ(same.code, kExitOk) << same.err;
  EXPECT_EQ(nlohmann::json::parse(same.out)["memory"], j["memory"]);

  // A Hugging Face folder: its config.json gives the shape.
  dir.write("model/config.json", R"({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 112, "vocab_size": 300})");
  dir.write("model/tokenizer.json", tailor::testing::byte_level_tokenizer_json());
  CliRun folder = tailor({"plan", "--model", dir.file("model"), "--gpus", "1xT4", "--seq-len", "64"});
  ASSERT_EQ(folder.code, kExitOk) << folder.err;
  EXPECT_NE(folder.out.find("Plan for model: qwen2"), std::string::npos) << folder.out;

  for (const auto& [args, says] :
       {std::pair<std::vector<std::string>, std::string>{{"plan", "--model", "llama-9"}, "neither a preset"},
        {{"plan", "--model", "gpt2", "--batch", "0"}, "--batch must be a positive integer"},
        {{"plan", "--model", "gpt2", "--adapter", "dora"}, "--adapter must be none, lora, qlora or auto"},
        {{"plan", "--model", "gpt2", example("tiny-cpu.yaml")}, "--model plans without a spec file"},
        {{"plan", "--adapter", "lora", example("tiny-cpu.yaml")}, "--adapter goes with --model"}}) {
    CliRun bad = tailor(args);
    EXPECT_EQ(bad.code, kExitUsage) << says;
    EXPECT_NE(bad.err.find(says), std::string::npos) << bad.err;
  }
}

TEST(CliTest, CatalogListsPresetsAndGpusAsTablesAndJson) {
  CliRun models = tailor({"catalog", "models"});
  ASSERT_EQ(models.code, kExitOk) << models.err;
  EXPECT_NE(models.out.find("gemma-2-9b"), std::string::npos);
  EXPECT_NE(models.out.find("9.24B"), std::string::npos) << models.out;
  CliRun json = tailor({"catalog", "models", "--output", "json"});
  ASSERT_EQ(json.code, kExitOk);
  const auto list = nlohmann::json::parse(json.out);
  ASSERT_EQ(list.size(), dsl::Catalog::builtin().models().size());
  for (const auto& m : list) {
    const dsl::ModelPreset* p = dsl::Catalog::builtin().find_model(m["name"].get<std::string>());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(m["parameters"].get<std::int64_t>(), p->params);
  }
  CliRun gpus = tailor({"catalog", "gpus", "--output", "json"});
  ASSERT_EQ(gpus.code, kExitOk);
  const auto g = nlohmann::json::parse(gpus.out);
  ASSERT_EQ(g.size(), dsl::Catalog::builtin().gpus().size());
  EXPECT_EQ(g[0]["memory_bytes"].get<std::int64_t>(), dsl::Catalog::builtin().gpus()[0].memory.count());
  EXPECT_NE(tailor({"catalog", "gpus"}).out.find("H100-80"), std::string::npos);
  EXPECT_EQ(tailor({"catalog", "everything"}).code, kExitUsage);
}

// The real binary, as a user runs it: exit codes and streams.
int run_binary(const std::string& args, std::string* output) {
  const std::string cmd = std::string(TAILOR_BINARY_DIR) + "/bin/tailor " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CliBinaryTest, RunTrainsTheTinyJobAndReportsOutOfMemory) {
  TempDir dir;
  std::string out;
  const std::string ok_dir = dir.file("ok");
  EXPECT_EQ(run_binary("run --out " + ok_dir + " --set training.max_steps=3 --set training.warmup_steps=1 " +
                           example("tiny-cpu.yaml"),
                       &out),
            0)
      << out;
  for (const char* f : {"plan.json", "metrics.jsonl", "events.jsonl", "model/config.json"}) {
    EXPECT_TRUE(fs::exists(ok_dir + "/" + f)) << f << "\n" << out;
  }
  EXPECT_NE(out.find("step 3/3"), std::string::npos) << out;
  out.clear();
  const std::string oom_dir = dir.file("oom");
  EXPECT_EQ(run_binary("run --out " + oom_dir + " --memory-limit 40MiB --set training.max_steps=3 "
                       "--set training.warmup_steps=1 " + example("tiny-cpu.yaml"),
                       &out),
            3)
      << out;
  EXPECT_NE(out.find("out of memory"), std::string::npos) << out;
}

// strategy.probe through `tailor run` and `tailor plan --probe`, and the
// calibration store they fill: a later plan for this machine is calibrated
// by what they measured, and `tailor calibration` shows and clears it.
TEST(CliBinaryTest, ProbesRecordCalibrationThatLaterPlansTake) {
  TempDir dir;
  const std::string store = dir.file("calibration.db");
  const std::string flags = " --calibration " + store + " --set training.max_steps=4 --set training.warmup_steps=1 ";
  std::string out;
  ASSERT_EQ(
      run_binary("run --out " + dir.file("run") + flags + "--set strategy.probe=2 " + example("tiny-cpu.yaml"), &out),
      0)
      << out;
  EXPECT_NE(out.find("probe 1/2"), std::string::npos) << out;
  EXPECT_NE(out.find("probe 2/2"), std::string::npos) << out;
  EXPECT_NE(out.find("the fastest measured that fits"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(dir.file("run/plan.probed.json"))) << out;
  const auto probed = nlohmann::json::parse(std::ifstream(dir.file("run/plan.probed.json")));
  ASSERT_EQ(probed["probe"]["candidates"].size(), 2u);
  for (const auto& c : probed["probe"]["candidates"]) {
    EXPECT_EQ(c["measured"]["outcome"], "fits") << c.dump();
    EXPECT_GT(c["measured"]["tokens_per_second"].get<double>(), 0) << c.dump();
    EXPECT_GT(c["measured"]["peak_bytes"].get<std::int64_t>(), 0) << c.dump();
    // How busy the machine was while it was timed (how busy is the machine's say).
    ASSERT_TRUE(c["measured"].contains("contention")) << c.dump();
    EXPECT_GE(c["measured"]["contention"].get<double>(), 0.0) << c.dump();
    EXPECT_LE(c["measured"]["contention"].get<double>(), 1.0) << c.dump();
  }
  {
    std::ifstream metrics(dir.file("run/metrics.jsonl"));
    int steps = 0;
    for (std::string line; std::getline(metrics, line);) {
      const auto m = nlohmann::json::parse(line);
      if (!m.contains("step")) continue;
      ++steps;
      ASSERT_TRUE(m.contains("contention")) << line;
      EXPECT_GE(m["contention"].get<double>(), 0.0) << line;
      EXPECT_LE(m["contention"].get<double>(), 1.0) << line;
    }
    EXPECT_EQ(steps, 4);
  }
  // Two probes and the run itself.
  out.clear();
  ASSERT_EQ(run_binary("calibration show --output json --calibration " + store, &out), 0) << out;
  const auto shown = nlohmann::json::parse(out);
  ASSERT_EQ(shown["records"].size(), 3u) << out;
  EXPECT_EQ(shown["records"][2]["source"], "job");
  ASSERT_EQ(shown["keys"].size(), 1u);
  EXPECT_EQ(shown["keys"][0]["machine"], cli_cpu_machine());
  EXPECT_EQ(shown["keys"][0]["runs"], 3);
  const double memory = shown["keys"][0]["memory_factor"].get<double>();
  const double speed = shown["keys"][0]["speed_factor"].get<double>();
  EXPECT_GE(memory, 1.0);
  // The next plan takes the factors: its speed estimate moves by the speed
  // factor, its peak by the memory factor (to the plan document's six
  // significant digits).
  std::string plain, calibrated;
  ASSERT_EQ(run_binary("plan --output json --no-calibration " + example("tiny-cpu.yaml"), &plain), 0) << plain;
  ASSERT_EQ(run_binary("plan --output json --calibration " + store + " " + example("tiny-cpu.yaml"), &calibrated), 0)
      << calibrated;
  const auto a = nlohmann::json::parse(plain.substr(plain.find('{')));
  const auto b = nlohmann::json::parse(calibrated.substr(calibrated.find('{')));
  ASSERT_TRUE(b.contains("calibration")) << calibrated;
  EXPECT_FALSE(a.contains("calibration"));
  EXPECT_EQ(b["calibration"]["runs"], 3);
  if (a["summary"] == b["summary"]) {
    EXPECT_NEAR(b["throughput"]["tokens_per_second"].get<double>(),
                speed * a["throughput"]["tokens_per_second"].get<double>(),
                2e-5 * b["throughput"]["tokens_per_second"].get<double>());
    EXPECT_NEAR(b["memory"]["per_gpu"]["total"].get<double>(), memory * a["memory"]["per_gpu"]["total"].get<double>(),
                2e-5 * b["memory"]["per_gpu"]["total"].get<double>());
  }
  out.clear();
  ASSERT_EQ(run_binary("plan --calibration " + store + " " + example("tiny-cpu.yaml"), &out), 0) << out;
  EXPECT_NE(out.find("Calibrated: peak estimates x"), std::string::npos) << out;
  EXPECT_NE(out.find("from 3 runs measured on " + cli_cpu_machine() + " / tailor / llama"), std::string::npos) << out;
  // `tailor plan --probe` measures and prints predicted beside measured.
  out.clear();
  ASSERT_EQ(run_binary("plan --probe 2 --calibration " + store + " " + example("tiny-cpu.yaml"), &out), 0) << out;
  EXPECT_NE(out.find("predicted beside measured"), std::string::npos) << out;
  // One of the two is marked as trained (which one is the machine's say).
  EXPECT_TRUE(out.find("1*") != std::string::npos || out.find("2*") != std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_binary("plan --probe 9 " + example("tiny-cpu.yaml"), &out), 2) << out;
  out.clear();
  EXPECT_EQ(run_binary("plan --probe 2 --gpus 1xT4 " + example("tiny-cpu.yaml"), &out), 2) << out;
  // Reset empties it; plans are then as before.
  out.clear();
  ASSERT_EQ(run_binary("calibration reset --calibration " + store, &out), 0) << out;
  EXPECT_NE(out.find("removed 5 records"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(run_binary("plan --calibration " + store + " " + example("tiny-cpu.yaml"), &out), 0) << out;
  EXPECT_EQ(out.find("Calibrated:"), std::string::npos) << out;
}

// Reading or clearing a store that is not there creates nothing, neither
// the file nor its folder; a file that is no store is an error naming it.
TEST(CliBinaryTest, CalibrationShowAndResetCreateNoStore) {
  TempDir dir;
  const std::string absent = dir.file("no/such/folder/calibration.db");
  std::string out;
  ASSERT_EQ(run_binary("calibration show --calibration " + absent, &out), 0) << out;
  EXPECT_NE(out.find("0 records"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(run_binary("calibration show --output json --calibration " + absent, &out), 0) << out;
  const auto shown = nlohmann::json::parse(out);
  EXPECT_TRUE(shown["records"].empty());
  EXPECT_TRUE(shown["keys"].empty());
  out.clear();
  ASSERT_EQ(run_binary("calibration reset --calibration " + absent, &out), 0) << out;
  EXPECT_NE(out.find("removed 0 records: there is no store at " + absent), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir.file("no"))) << "nothing may be created";
  const std::string junk = dir.write("junk.db", "a text file, not a database, of some length\n");
  out.clear();
  EXPECT_EQ(run_binary("calibration show --calibration " + junk, &out), 1) << out;
  EXPECT_NE(out.find(junk), std::string::npos) << out;
}

// A preset without weights is refused before anything runs; with init:
// random it trains (the test above).
TEST(CliBinaryTest, RunRefusesAPresetWithoutWeights) {
  TempDir dir;
  std::string out;
  EXPECT_EQ(run_binary("run --out " + dir.file("out") + " --set model.init=pretrained " + example("tiny-cpu.yaml"), &out),
            1)
      << out;
  EXPECT_NE(out.find("tiny-cpu.yaml: error: model.preset tiny-llama-byte has no weights here"), std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(dir.file("out/events.jsonl")));
}

TEST(CliBinaryTest, ExitCodesAreDocumented) {
  std::string out;
  EXPECT_EQ(run_binary("validate " + example("tiny-cpu.yaml"), &out), 0) << out;
  out.clear();
  EXPECT_EQ(run_binary("validate " + spec_case("malformed.yaml"), &out), 1) << out;
  EXPECT_NE(out.find("malformed.yaml:7:9: error: malformed YAML"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_binary("validate /no/such/file.yaml", &out), 1);
  EXPECT_NE(out.find("/no/such/file.yaml: error: no such file"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_binary("frobnicate", &out), 2);
}

}  // namespace
}  // namespace tailor::cli

namespace tailor::cli {
namespace {

// A GPU plan whose runner finds no CUDA device trained on the CPU before,
// with only an event saying so: `tailor run` now fails as bad input with the
// reason, and trains it on the CPU when the spec says resources.device: cpu.
// CUDA_VISIBLE_DEVICES="" hides any GPU, so this means the same on a GPU
// machine. Both builds of a CUDA build's runner say why: the CUDA build
// that LibTorch sees no device, the CPU build (where no driver loads) that
// there is no driver.
TEST(CliRunTest, AGpuPlanWithoutCudaFailsWithTheReasonUnlessTheSpecSaysCpu) {
  const fs::path bin = fs::path(TAILOR_BINARY_DIR) / "bin";
  if (!fs::exists(bin / "tailor-runner")) GTEST_SKIP() << "no tailor-runner built";
  TempDir dir;
  auto run = [&](const std::string& name, const std::vector<std::string>& extra, const char* variant = "") {
    platform::LaunchRequest req;
    req.argv = {(bin / "tailor").string(), "run", example("tiny-cpu.yaml"), "--out", dir.file(name), "--gpus", "1xT4",
                "--set", "resources.gpus=1", "--set", "strategy.precision=fp32", "--set", "training.max_steps=2",
                "--set", "checkpoint.every_steps=0"};
    req.argv.insert(req.argv.end(), extra.begin(), extra.end());
    req.log_path = dir.file(name + ".log");
    req.env["CUDA_VISIBLE_DEVICES"] = "";
    req.env["OMP_WAIT_POLICY"] = "PASSIVE";
    req.env["TAILOR_RUNNER_VARIANT"] = variant;
    return run_logged(req);
  };
  const auto [refused, why] = run("auto", {});
  EXPECT_EQ(refused, kExitInvalid) << why;
  EXPECT_NE(why.find("the plan is for GPUs but"), std::string::npos) << why;
  EXPECT_TRUE(why.find("CUDA_VISIBLE_DEVICES='' hides them") != std::string::npos ||
              why.find("this machine has no NVIDIA driver (libcuda.so.1") != std::string::npos ||
              why.find("built without its CUDA path") != std::string::npos)
      << why;
  EXPECT_NE(why.find("set resources.device: cpu"), std::string::npos) << why;
  if (fs::exists(bin / "tailor-runner-cuda")) {
    const auto [cuda_refused, cuda_why] = run("cuda-build", {}, "cuda");
    EXPECT_EQ(cuda_refused, kExitInvalid) << cuda_why;
    EXPECT_NE(
        cuda_why.find("the plan is for GPUs but LibTorch sees no CUDA device: CUDA_VISIBLE_DEVICES='' hides them"),
        std::string::npos)
        << cuda_why;
  }

  const auto [trained, log] = run("cpu", {"--set", "resources.device=cpu"});
  ASSERT_EQ(trained, kExitOk) << log;
  std::ifstream events(dir.file("cpu/events.jsonl"));
  std::string first;
  std::getline(events, first);
  const auto start = nlohmann::json::parse(first);
  EXPECT_EQ(start["device"], "cpu");
  EXPECT_NE(start["device_reason"].get<std::string>().find("resources.device: cpu"), std::string::npos) << start;
}

// SIGTERM to `tailor run` (a scheduler's stop, systemd, kill) reaches its
// runner, which checkpoints and stops; none is left training under PID 1.
TEST(CliRunTest, SigtermToTailorRunStopsItsRunnerToo) {
  const fs::path bin = fs::path(TAILOR_BINARY_DIR) / "bin";
  if (!fs::exists(bin / "tailor-runner")) GTEST_SKIP() << "no tailor-runner built";
  // Orphans are re-parented here, so a runner left behind can be found and
  // stopped at the end (and does not outlive the test).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  TempDir dir;
  const std::string out = dir.file("run");
  platform::LaunchRequest req;
  req.argv = {(bin / "tailor").string(), "run", example("tiny-cpu.yaml"), "--out", out,
              "--set", "training.max_steps=100000", "--set", "checkpoint.every_steps=0"};
  req.log_path = dir.file("tailor.log");
  req.env["OMP_WAIT_POLICY"] = "PASSIVE";
  auto tailor_run = platform::launch_process(req);
  ASSERT_TRUE(tailor_run.is_ok()) << tailor_run.status().to_string();
  // The runner's start event carries its pid; it comes after the first
  // forward and backward pass (the probe).
  pid_t runner = -1;
  for (int i = 0; i < 24000 && runner < 0; ++i) {
    std::ifstream events(out + "/events.jsonl");
    for (std::string line; std::getline(events, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == "start") runner = j.value("pid", -1);
    }
    if (runner < 0) usleep(5000);
  }
  ASSERT_GT(runner, 0) << "no start event; log: " << dir.file("tailor.log");
  struct StopRunner {
    pid_t pid;
    ~StopRunner() {
      // Only a runner re-parented here (still our child) is stopped.
      if (waitpid(pid, nullptr, WNOHANG) == 0 && ::kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
    }
  } guard{runner};
  ASSERT_EQ(::kill(tailor_run->pid, SIGTERM), 0);
  auto exit = platform::wait_child(tailor_run->pid);
  ASSERT_TRUE(exit.is_ok());
  EXPECT_EQ(exit->signal, 0) << "tailor run died of the signal instead of stopping its runner";
  EXPECT_EQ(exit->code, kExitCancelled);
  // `tailor run` reaped its runner before it exited: the pid is gone (or,
  // at worst, reused by an unrelated process with another start time).
  EXPECT_FALSE(platform::process_start_ticks(runner).has_value() && waitpid(runner, nullptr, WNOHANG) == 0)
      << "tailor-runner " << runner << " is still running";
  std::ifstream events(out + "/events.jsonl");
  std::string last;
  for (std::string line; std::getline(events, line);) last = line;
  const auto j = nlohmann::json::parse(last, nullptr, false);
  EXPECT_EQ(j.value("event", ""), "cancelled") << last;
  EXPECT_EQ(j.value("exit_code", -1), 4) << last;
}

}  // namespace
}  // namespace tailor::cli

namespace tailor::cli {
namespace {

// `tailor list` once padded columns to fixed widths, so a long job name ran
// into the state beside it.
TEST(CliTest, ListColumnsAreAsWideAsTheirWidestCellAndNeverTouch) {
  const std::string name(63, 'n');
  const std::string out = format_columns({{"ID", "NAME", "STATE", "REASON"},
                                          {"job-1", name, "failed", "bad input"},
                                          {"job-22", "short", "succeeded", ""}});
  std::istringstream lines(out);
  std::string header, first, second;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_EQ(first, "job-1   " + name + "  failed     bad input");
  EXPECT_EQ(second, "job-22  short" + std::string(60, ' ') + "succeeded");
  // Every column starts at the same offset on every line.
  EXPECT_EQ(header.find("STATE"), first.find("failed"));
  EXPECT_EQ(header.find("STATE"), second.find("succeeded"));
  EXPECT_EQ(header.find("REASON"), first.find("bad input"));
}

// `tailor COMMAND ARGS...` of the build, its output in dir/NAME.log: the
// exit code and that output.
std::pair<int, std::string> run_tailor(const TempDir& dir, const std::string& name, const std::string& command,
                                       const std::vector<std::string>& args) {
  platform::LaunchRequest req;
  req.argv = {(fs::path(TAILOR_BINARY_DIR) / "bin" / "tailor").string(), command};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.log_path = dir.file(name + ".log");
  return run_logged(req);
}

// `tailor data preview` (through tailor-data): the shipped chat example's
// conversations rendered with its template, the assistant's replies marked
// as trained, as text and as JSON; a chat spec without a template is refused
// naming the places looked at.
TEST(CliDataTest, PreviewShowsTheRenderedConversationsAndWhatIsTrained) {
  const fs::path bin = fs::path(TAILOR_BINARY_DIR) / "bin";
  if (!fs::exists(bin / "tailor-data")) GTEST_SKIP() << "no tailor-data built";
  TempDir dir;
  auto run = [&](const std::string& name, const std::vector<std::string>& args) {
    return run_tailor(dir, name, "data", args);
  };
  const auto [code, text] = run("text", {"preview", example("chat-cpu.yaml"), "--n", "2"});
  ASSERT_EQ(code, kExitOk) << text;
  EXPECT_NE(text.find("<|im_start|>user\nSort a list in Python.<|im_end|>\n<|im_start|>assistant\n[[Use sorted(xs)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("chats.jsonl:2 · "), std::string::npos) << text;
  EXPECT_EQ(text.find("chats.jsonl:3 · "), std::string::npos) << text;
  EXPECT_NE(text.find("2 examples: "), std::string::npos) << text;

  const auto [json_code, json_text] = run("json", {"preview", example("chat-cpu.yaml"), "--n", "1", "--output", "json"});
  ASSERT_EQ(json_code, kExitOk) << json_text;
  const auto j = nlohmann::json::parse(json_text);
  ASSERT_EQ(j["examples"].size(), 1u);
  const auto& ex = j["examples"][0];
  const std::string rendered = ex["text"];
  const auto ids = ex["input_ids"].get<std::vector<int>>();
  const auto labels = ex["labels"].get<std::vector<int>>();
  ASSERT_EQ(ids.size(), rendered.size());  // the byte tokenizer: one id per byte
  std::string trained;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (labels[i] != -100) {
      EXPECT_EQ(labels[i], ids[i]);
      trained += static_cast<char>(ids[i]);
    }
  }
  EXPECT_EQ(trained.rfind("Use sorted(xs)", 0), 0u) << trained;
  EXPECT_EQ(trained.find("<|im_start|>"), std::string::npos) << trained;
  EXPECT_EQ(ex["trained_tokens"], trained.size());

  dir.write("nochat.yaml", "apiVersion: tailor/v1\nkind: TrainingJob\nmodel:\n  preset: tiny-llama-byte\ndata:\n  train: " +
                               (fs::path(TAILOR_SOURCE_DIR) / "configs/data/chats.jsonl").string() +
                               "\n  chat: messages\n  seq_len: 256\n");
  const auto [bad, why] = run("bad", {"preview", dir.file("nochat.yaml")});
  EXPECT_EQ(bad, kExitInvalid) << why;
  EXPECT_NE(why.find("data.chat_template must name a template file"), std::string::npos) << why;
  const auto [usage, usage_text] = run("usage", {"preview", example("chat-cpu.yaml"), "--n", "0"});
  EXPECT_EQ(usage, kExitUsage) << usage_text;
  const auto [help, help_text] = run("help", {"--help"});
  EXPECT_EQ(help, kExitOk);
  EXPECT_NE(help_text.find("usage: tailor data preview"), std::string::npos) << help_text;
}

// `tailor cache` (through tailor-data) on a folder of a damaged entry, a
// writer's file left two hours ago and a file of someone else's: listed as
// JSON, pruned (a dry run first) without touching the other file, and its
// command line checked. Real entries: tests/runner/io/cache_folder_test.cpp.
TEST(CliDataTest, CacheShowsPrunesAndRefusesBadArguments) {
  const fs::path bin = fs::path(TAILOR_BINARY_DIR) / "bin";
  if (!fs::exists(bin / "tailor-data")) GTEST_SKIP() << "no tailor-data built";
  TempDir dir;
  const std::string cache = dir.file("cache");
  const std::string damaged = dir.write("cache/tokens-00000000deadbeef.bin", std::string(100, 'x'));
  const std::string part = dir.write("cache/reference-0000000000000002.logps.part-4242", "left behind");
  const std::string foreign = dir.write("cache/notes.txt", "the user's own file");
  const auto two_hours_ago = fs::last_write_time(part) - std::chrono::hours(2);
  fs::last_write_time(part, two_hours_ago);
  auto run = [&](const std::string& name, const std::vector<std::string>& args) {
    return run_tailor(dir, name, "cache", args);
  };
  const auto [show_code, show] = run("show", {"show", "--cache-dir", cache, "--output", "json"});
  ASSERT_EQ(show_code, kExitOk) << show;
  const auto listed = nlohmann::json::parse(show);
  ASSERT_EQ(listed["entries"].size(), 2u) << show;
  // Most recently used first: the damaged entry written now, then the writer's file.
  EXPECT_EQ(listed["entries"][0]["file"], damaged);
  EXPECT_EQ(listed["entries"][0]["problem"], "not a token cache entry");
  EXPECT_EQ(listed["entries"][1]["kind"], "partial");
  EXPECT_EQ(listed["bytes"], 100 + 11);

  const auto [dry_code, dry] = run("dry", {"prune", "--orphaned", "--dry-run", "--cache-dir", cache});
  ASSERT_EQ(dry_code, kExitOk) << dry;
  EXPECT_NE(dry.find("would remove " + damaged + " (100 B): unreadable"), std::string::npos) << dry;
  EXPECT_NE(dry.find("Would remove 2 entries"), std::string::npos) << dry;
  EXPECT_TRUE(fs::exists(damaged) && fs::exists(part));

  const auto [prune_code, pruned] = run("prune", {"prune", "--orphaned", "--cache-dir", cache, "--output", "json"});
  ASSERT_EQ(prune_code, kExitOk) << pruned;
  const auto result = nlohmann::json::parse(pruned);
  EXPECT_EQ(result["removed"].size(), 2u);
  EXPECT_EQ(result["removed_bytes"], 111);
  EXPECT_EQ(result["kept"], 0);
  EXPECT_FALSE(fs::exists(damaged) || fs::exists(part));
  EXPECT_TRUE(fs::exists(foreign));

  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"prune", "--cache-dir", cache}, "prune needs --max-size, --unused-for or --orphaned"},
           {{"prune", "--max-size", "lots", "--cache-dir", cache}, "--max-size: "},
           {{"prune", "--unused-for", "3x", "--cache-dir", cache}, "--unused-for: \"3x\" is not an age"},
           {{"show", "--orphaned"}, "--orphaned is prune's"},
           {{"tidy"}, "unknown command 'tidy'"}}) {
    const auto [code, text] = run("usage", args);
    EXPECT_EQ(code, kExitUsage) << text;
    EXPECT_NE(text.find(says), std::string::npos) << text;
  }
  const auto [help, help_text] = run("help", {"--help"});
  EXPECT_EQ(help, kExitOk);
  EXPECT_NE(help_text.find("usage: tailor cache show"), std::string::npos) << help_text;
}

// A Parquet file (written by pyarrow) and a JSON Lines file as one mixed
// training set: validated with a line per dataset, previewed with rows
// named by row group, and trained by `tailor run` with the mix reported.
TEST(CliDataTest, AParquetFileMixedWithJsonLinesValidatesPreviewsAndTrains) {
  const fs::path bin = fs::path(TAILOR_BINARY_DIR) / "bin";
  if (!fs::exists(bin / "tailor-data")) GTEST_SKIP() << "no tailor-data built";
  TempDir dir;
  const std::string chats = (fs::path(TAILOR_SOURCE_DIR) / "configs/data/chats.jsonl").string();
  const std::string write = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python -c \"import json, pyarrow as pa, "
                            "pyarrow.parquet as pq; rows = [json.loads(l) for l in open('" + chats +
                            "')]; pq.write_table(pa.Table.from_pylist(rows), '" + dir.file("chats.parquet") +
                            "', row_group_size=10)\"";
  ASSERT_EQ(std::system(write.c_str()), 0) << write;
  dir.write("mixed.yaml", "apiVersion: tailor/v1\nkind: TrainingJob\nname: mixed\nmodel:\n"
                          "  arch: {family: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, kv_heads: 2, "
                          "vocab: 260, max_seq_len: 512}\n"
                          "data:\n  train:\n    - chats.parquet\n    - {path: " + chats + ", weight: 0.5}\n"
                          "  mix: interleave\n  chat: messages\n  chat_template: " + TAILOR_SOURCE_DIR +
                          "/configs/data/chatml.jinja\n  seq_len: 512\n"
                          "training: {global_batch_size: 4, max_steps: 2, lr: 1e-3, warmup_steps: 1}\n"
                          "strategy: {adapter: none}\nresources: {gpus: 0, host_memory: 2GiB}\n");
  auto run = [&](const std::string& name, std::vector<std::string> args) {
    platform::LaunchRequest req;
    req.argv = {(bin / "tailor").string()};
    req.argv.insert(req.argv.end(), args.begin(), args.end());
    req.log_path = dir.file(name + ".log");
    return run_logged(req);
  };
  const auto [vcode, vtext] = run("validate", {"validate", dir.file("mixed.yaml")});
  ASSERT_EQ(vcode, kExitOk) << vtext;
  EXPECT_NE(vtext.find("data.train[0]: 32 records"), std::string::npos) << vtext;
  EXPECT_NE(vtext.find("data.train[1].path: 32 records"), std::string::npos) << vtext;

  const auto [pcode, ptext] = run("preview", {"data", "preview", dir.file("mixed.yaml"), "--n", "40", "--output", "json"});
  ASSERT_EQ(pcode, kExitOk) << ptext;
  const auto preview = nlohmann::json::parse(ptext);
  ASSERT_EQ(preview["examples"].size(), 40u);
  EXPECT_EQ(preview["examples"][12]["record"], dir.file("chats.parquet") + ": row 12 (row group 1, row 2 in it)");
  EXPECT_EQ(preview["examples"][32]["record"], chats + ":1");
  // The same conversation from either file: the same ids and labels.
  EXPECT_EQ(preview["examples"][0]["input_ids"], preview["examples"][32]["input_ids"]);
  EXPECT_EQ(preview["examples"][0]["labels"], preview["examples"][32]["labels"]);

  const auto [rcode, rtext] = run("run", {"run", "--out", dir.file("out"), dir.file("mixed.yaml")});
  ASSERT_EQ(rcode, kExitOk) << rtext;
  EXPECT_NE(rtext.find("data: 2 datasets mixed (interleave): "), std::string::npos) << rtext;
  EXPECT_NE(rtext.find("chats.parquet: 32 examples -> 64 (66.7%)"), std::string::npos) << rtext;
}

// `tailor data stats` counts every example as the preview tokenizes it (the
// sums, extremes and the median of the preview's own lengths), a cut at
// --max-examples says so, and `tailor plan` reports the same lengths.
TEST(CliDataTest, StatsCountEveryExampleAsThePreviewTokenizesItAndThePlanReportsThem) {
  const fs::path bin = fs::path(TAILOR_BINARY_DIR) / "bin";
  if (!fs::exists(bin / "tailor-data")) GTEST_SKIP() << "no tailor-data built";
  TempDir dir;
  auto run = [&](const std::string& name, std::vector<std::string> args) {
    platform::LaunchRequest req;
    req.argv = {(bin / "tailor").string()};
    req.argv.insert(req.argv.end(), args.begin(), args.end());
    req.log_path = dir.file(name + ".log");
    return run_logged(req);
  };
  for (const char* spec : {"chat-cpu.yaml", "dpo-cpu.yaml"}) {
    const auto [pcode, ptext] = run(std::string(spec) + "-preview", {"data", "preview", example(spec), "--n", "1000000", "--output", "json"});
    ASSERT_EQ(pcode, kExitOk) << ptext;
    const auto preview = nlohmann::json::parse(ptext);
    std::vector<std::int64_t> lengths;
    std::int64_t tokens = 0, trained = 0, too_long = 0;
    for (const auto& ex : preview["examples"]) {
      lengths.push_back(ex["tokens"].get<std::int64_t>());
      tokens += lengths.back();
      trained += ex["trained_tokens"].get<std::int64_t>();
      too_long += ex["too_long"].get<bool>() ? 1 : 0;
    }
    ASSERT_FALSE(lengths.empty());
    std::sort(lengths.begin(), lengths.end());
    const auto [code, text] = run(std::string(spec) + "-stats", {"data", "stats", example(spec), "--output", "json"});
    ASSERT_EQ(code, kExitOk) << text;
    const auto stats = nlohmann::json::parse(text);
    EXPECT_TRUE(stats["complete"].get<bool>());
    EXPECT_EQ(stats["examples"], lengths.size()) << spec;
    EXPECT_EQ(stats["tokens"], tokens) << spec;
    EXPECT_EQ(stats["trained_tokens"], trained) << spec;
    EXPECT_EQ(stats["longer_than_seq_len"], too_long) << spec;
    EXPECT_EQ(stats["tokens_per_example"]["min"], lengths.front()) << spec;
    EXPECT_EQ(stats["tokens_per_example"]["max"], lengths.back()) << spec;
    const std::int64_t p50 = lengths[(lengths.size() + 1) / 2 - 1];  // nearest rank
    EXPECT_EQ(stats["tokens_per_example"]["p50"], p50) << spec;
    if (std::string(spec) == "dpo-cpu.yaml") {
      EXPECT_EQ(stats["pairs"], lengths.size() / 2);
    } else {
      EXPECT_TRUE(stats["pairs"].is_null());
      const auto [plan_code, plan_text] = run("plan", {"plan", example(spec)});
      EXPECT_EQ(plan_code, kExitOk) << plan_text;
      EXPECT_NE(plan_text.find("Lengths: " + std::to_string(lengths.size()) + " examples, tokens per example p50 " +
                               std::to_string(p50) + ", "),
                std::string::npos)
          << plan_text;
    }
  }
  const auto [cut_code, cut_text] = run("cut", {"data", "stats", example("chat-cpu.yaml"), "--max-examples", "5"});
  ASSERT_EQ(cut_code, kExitOk) << cut_text;
  EXPECT_NE(cut_text.find("(its first 5 examples)"), std::string::npos) << cut_text;
  const auto [usage, usage_text] = run("usage", {"data", "stats", example("chat-cpu.yaml"), "--n", "2"});
  EXPECT_EQ(usage, kExitUsage) << usage_text;
  EXPECT_NE(usage_text.find("--n is preview's, not stats'"), std::string::npos) << usage_text;
}

// tailor top's progress line: MFU where the runner reported it (a GPU the
// catalog knows), nothing where it did not.
TEST(CliTest, TheProgressLineShowsMfuOnlyWhereReported) {
  Progress p;
  p.state = "running";
  p.step = 40;
  p.total = 200;
  p.tokens_per_second = 5120;
  EXPECT_EQ(progress_line(p, false).find("MFU"), std::string::npos) << progress_line(p, false);
  p.mfu = 0.4123;
  EXPECT_NE(progress_line(p, false).find("5120 tok/s  MFU 41.2%"), std::string::npos) << progress_line(p, false);
}

}  // namespace
}  // namespace tailor::cli
