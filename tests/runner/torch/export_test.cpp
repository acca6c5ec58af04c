// `tailor export` and `tailor-runner export` (runner/torch/export_command.h)
// against PEFT's merge_and_unload() (export_reference.py in .venv): on every
// family an adapter merged into its base, written in fp32 and bf16, has
// PEFT's tensors (bf16: PEFT's merge rounded once) and loads in
// transformers with the merged model's logits; a chat model's export keeps
// its tokenizer and template and generates as the source does; what is not
// built or would overwrite is refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsl/model_family.h"
#include "tests/runner/torch/generate_fixture.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::json;
using tailor::testing::read_text;
using tailor::testing::TempDir;

const std::string kBin = std::string(TAILOR_BINARY_DIR) + "/bin/";

// Runs a command; its exit code, its stdout in `out` and stderr in `err`.
int shell(const TempDir& dir, const std::string& cmd, std::string* out = nullptr, std::string* err = nullptr) {
  const int rc = std::system((cmd + " > " + dir.file("out.txt") + " 2> " + dir.file("err.txt")).c_str());
  if (out) *out = read_text(dir.file("out.txt"));
  if (err) *err = read_text(dir.file("err.txt"));
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

::testing::AssertionResult export_reference(const TempDir& dir, const std::string& args) {
  return venv_script(dir, "export_reference.py", args, /*echo=*/true);
}

TEST(ExportTest, AMergedAdapterHasPeftsWeightsAndLogitsOnEveryFamily) {
  TempDir dir;
  std::string names;
  const std::vector<std::string> families = family_names(&names);
  ASSERT_TRUE(generate_reference(dir, "make " + dir.path().string() + names));
  for (const std::string& family : families) {
    SCOPED_TRACE(family);
    const std::string d = dir.file(family);
    std::string err;
    // The runner's command in fp32; the CLI's, which runs it, in bf16.
    ASSERT_EQ(shell(dir, kBin + "tailor-runner export " + d + "/adapter -o " + d + "/export-fp32 --dtype fp32",
                    nullptr, &err),
              0)
        << err;
    EXPECT_NE(err.find("merged to " + d + "/export-fp32 as fp32 safetensors"), std::string::npos) << err;
    std::string out;
    ASSERT_EQ(shell(dir, kBin + "tailor export " + d + "/adapter -o " + d + "/export-bf16 --dtype bf16 --output json",
                    &out, &err),
              0)
        << err;
    const Json j = Json::parse(out);
    EXPECT_EQ(j["dtype"], "bf16");
    EXPECT_TRUE(j["merged"].get<bool>());
  }
  EXPECT_TRUE(export_reference(dir, "merged " + dir.path().string() + names));
}

TEST(ExportTest, AChatModelKeepsItsTokenizerAndTemplateAndWhatIsNotBuiltIsRefused) {
  TempDir dir;
  ASSERT_TRUE(generate_reference(dir, "chat " + dir.path().string()));
  const std::string model = dir.file("model"), exported = dir.file("export");
  std::string out, err;
  ASSERT_EQ(shell(dir, kBin + "tailor export " + model + " -o " + exported, nullptr, &err), 0) << err;
  EXPECT_NE(err.find("as fp32 safetensors"), std::string::npos) << err;  // auto: the folder's float32
  EXPECT_TRUE(export_reference(dir, "tokenizer " + model + " " + exported));
  // It generates as the source does.
  const std::string ask = " --messages " + dir.file("conversation.json") + " --max-tokens 16 --output json";
  ASSERT_EQ(shell(dir, kBin + "tailor-runner generate " + model + ask, &out, &err), 0) << err;
  const Json source = Json::parse(out);
  ASSERT_EQ(shell(dir, kBin + "tailor-runner generate " + exported + ask, &out, &err), 0) << err;
  const Json copy = Json::parse(out);
  EXPECT_EQ(copy["prompt_ids"], source["prompt_ids"]);
  EXPECT_EQ(copy["ids"], source["ids"]);
  EXPECT_EQ(copy["stop_ids"], source["stop_ids"]);

  // Refused, saying why, and nothing written.
  EXPECT_EQ(shell(dir, kBin + "tailor export " + model + " -o " + exported, nullptr, &err), 1);
  EXPECT_NE(err.find("exists; choose another folder, or give --force"), std::string::npos) << err;
  EXPECT_EQ(shell(dir, kBin + "tailor export " + model + " -o " + exported + " --force --dtype bf16", nullptr, &err), 0)
      << err;
  EXPECT_NE(read_text(exported + "/config.json").find("\"bfloat16\""), std::string::npos);
  EXPECT_EQ(shell(dir, kBin + "tailor export " + model + " -o " + dir.file("g") + " --format gguf --quantize Q4_K_M",
                  nullptr, &err),
            1);
  EXPECT_NE(err.find("--quantize Q4_K_M needs llama.cpp's llama-quantize"), std::string::npos) << err;
  EXPECT_EQ(shell(dir, kBin + "tailor export " + model + " -o " + dir.file("h") + " --dtype fp8", nullptr, &err), 2);
  EXPECT_NE(err.find("--dtype: expected auto, fp32, bf16 or fp16"), std::string::npos) << err;
  EXPECT_EQ(shell(dir, kBin + "tailor export " + model, nullptr, &err), 2);
  EXPECT_NE(err.find("-o DIR"), std::string::npos) << err;
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_EQ(shell(dir, kBin + "tailor export " + dir.file("empty") + " -o " + dir.file("e"), nullptr, &err), 1);
  EXPECT_NE(err.find("not a model folder"), std::string::npos) << err;
  for (const char* never : {"g", "h", "e"}) EXPECT_FALSE(std::filesystem::exists(dir.file(never))) << never;
}

}  // namespace
}  // namespace tailor::runner
