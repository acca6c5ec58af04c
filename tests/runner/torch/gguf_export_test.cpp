// `tailor export --format gguf` (runner/torch/gguf_export.h) against the
// real readers (gguf_reference.py in .venv): on every family it exports, an
// adapter merged and written as f16, bf16, f32 and q8_0 is read by the
// `gguf` package with the converter's names, shapes and bytes, and loaded by
// llama.cpp itself, whose logits, tokenizer and chat formatting are
// transformers', the family tokenizer's and Tailor's. What llama.cpp would
// compute otherwise is refused or warned about, and nothing half-written.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/data/chat_tokens.h"
#include "runner/torch/export_command.h"
#include "runner/torch/gguf_export.h"
#include "tests/runner/torch/generate_fixture.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using tailor::testing::read_text;
using tailor::testing::TempDir;

const std::string kBin = std::string(TAILOR_BINARY_DIR) + "/bin/";
// Every family GGUF export takes, and the tokenizer gguf_reference.py gives
// it: SentencePiece (llama, mixtral, gemma2, gemma3, phi3) or byte-level BPE with
// Llama 3's (mistral), Qwen2's (qwen2, qwen3) or GPT-2's expression (gpt2, gpt_neox).
const std::vector<std::string> kFamilies = {"llama",  "mistral", "mixtral", "qwen2", "qwen3",
                                            "gemma2", "gemma3",  "gpt2",    "phi3",  "gpt_neox"};

int shell(const TempDir& dir, const std::string& cmd, std::string* out = nullptr, std::string* err = nullptr) {
  const int rc = std::system((cmd + " > " + dir.file("out.txt") + " 2> " + dir.file("err.txt")).c_str());
  if (out) *out = read_text(dir.file("out.txt"));
  if (err) *err = read_text(dir.file("err.txt"));
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Tailor's rendering of the family's conversation with its generation
// prompt, as training and `tailor generate` render it; empty without a template.
std::string tailor_chat_text(const std::string& family_dir) {
  auto model = open_on_cpu(family_dir + "/base");
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok() || !model->chat) return "";
  const std::string conversation = "{\"messages\": " + read_text(family_dir + "/conversation.json") + "}";
  auto text = data::render_conversation(*model->chat, conversation, /*add_generation_prompt=*/true);
  EXPECT_TRUE(text.is_ok()) << text.status().message();
  return text.is_ok() ? *text : "";
}

class GgufExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The Go program that reads the Modelfiles caches its objects here.
    ::setenv("TAILOR_GOCACHE", (std::string(TAILOR_BINARY_DIR) + "/go-cache").c_str(), 0);
    dir_ = new TempDir();
    std::string names;
    for (const std::string& f : kFamilies) names += " " + f;
    made_ = venv_script(*dir_, "gguf_reference.py", "make " + dir_->path().string() + names);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
  static ::testing::AssertionResult made_;
};
TempDir* GgufExportTest::dir_ = nullptr;
::testing::AssertionResult GgufExportTest::made_ = ::testing::AssertionFailure();

TEST_F(GgufExportTest, EveryFamilyLoadsInLlamaCppWithTransformersLogitsTokensAndTailorsChatFormat) {
  ASSERT_TRUE(made_);
  std::string families;
  for (const std::string& family : kFamilies) {
    SCOPED_TRACE(family);
    families += " " + family;
    const std::string d = dir_->file(family);
    for (const char* outtype : {"f16", "bf16", "f32", "q8_0"}) {
      const std::string file = d + "/tailor-" + outtype + ".gguf";
      const std::vector<std::string> args = {d + "/base", "--adapter", d + "/adapter", "--format", "gguf", "--outtype",
                                             outtype, "-o", file, "--output", "json"};
      std::string out, err;
      if (family == "qwen2" && std::string(outtype) == "f16") {
        // The CLI, which runs tailor-runner, once; the command in-process otherwise.
        std::string cmd = kBin + "tailor export";
        for (const std::string& a : args) cmd += " " + a;
        ASSERT_EQ(shell(*dir_, cmd, &out, &err), 0) << err;
      } else {
        std::ostringstream o, e;
        ASSERT_EQ(run_export_command(args, o, e), 0) << e.str();
        out = o.str();
      }
      const Json j = Json::parse(out);
      EXPECT_EQ(j["format"], "gguf");
      EXPECT_EQ(j["outtype"], outtype);
      EXPECT_TRUE(j["merged"].get<bool>());
      EXPECT_EQ(j["bytes"].get<std::uintmax_t>(), fs::file_size(file));
      EXPECT_TRUE(j["warnings"].empty()) << j.dump();
      EXPECT_FALSE(fs::exists(file + ".tmp"));
      // Ollama's Modelfile beside it (gguf_reference.py reads it as Ollama
      // does); a chat template always has a TEMPLATE of its own here.
      const std::string modelfile = d + "/tailor-" + outtype + ".Modelfile";
      EXPECT_EQ(j["modelfile"], modelfile);
      EXPECT_TRUE(fs::exists(modelfile));
      EXPECT_TRUE(j["ollama"]["template"].get<bool>()) << j["ollama"].dump();
    }
    if (const std::string text = tailor_chat_text(d); !text.empty()) std::ofstream(d + "/tailor-chat.txt") << text;
  }
  EXPECT_TRUE(venv_script(*dir_, "gguf_reference.py", "check " + dir_->path().string() + families, /*echo=*/true));
}

TEST_F(GgufExportTest, WhatLlamaCppComputesOtherwiseIsRefusedOrWarnedAboutAndNothingIsHalfWritten) {
  ASSERT_TRUE(made_);
  const std::string qwen = dir_->file("qwen2") + "/base", file = dir_->file("refused.gguf");
  std::string out, err;
  // Another type, a quantisation left to llama.cpp, safetensors' dtype flag.
  EXPECT_EQ(shell(*dir_, kBin + "tailor export " + qwen + " --format gguf --outtype q4_0 -o " + file, nullptr, &err), 2);
  EXPECT_NE(err.find("--outtype: expected f16, bf16, f32 or q8_0, got \"q4_0\""), std::string::npos) << err;
  // No llama-quantize to be found: refused before the model is read.
  EXPECT_EQ(shell(*dir_, "PATH=/usr/bin:/bin " + kBin + "tailor export " + qwen + " --format gguf --quantize Q4_K_M -o " + file,
                  nullptr, &err),
            1);
  EXPECT_NE(err.find("--quantize Q4_K_M needs llama.cpp's llama-quantize, which was not found"), std::string::npos) << err;
  EXPECT_EQ(shell(*dir_, kBin + "tailor export " + qwen + " --format gguf --dtype bf16 -o " + file, nullptr, &err), 2);
  EXPECT_NE(err.find("a GGUF file's type is --outtype"), std::string::npos) << err;
  EXPECT_EQ(shell(*dir_, kBin + "tailor export " + qwen + " --outtype f16 -o " + file, nullptr, &err), 2);
  EXPECT_NE(err.find("--outtype is for --format gguf"), std::string::npos) << err;
  EXPECT_EQ(shell(*dir_, kBin + "tailor export " + qwen + " --format gguf -o " + dir_->path().string(), nullptr, &err), 1);
  EXPECT_NE(err.find("exists; choose another file"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(file));
  // A Modelfile already where this file's would go: refused before the
  // model is read, unless --force or --no-modelfile.
  const std::string premade = dir_->file("premade.gguf");
  std::ofstream(dir_->file("premade.Modelfile")) << "FROM ./elsewhere.gguf\n";
  EXPECT_EQ(shell(*dir_, kBin + "tailor export " + qwen + " --format gguf -o " + premade, nullptr, &err), 1);
  EXPECT_NE(err.find("premade.Modelfile exists (the Ollama Modelfile beside the file)"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(premade));
  // --no-modelfile writes the file alone and leaves that Modelfile as it was.
  EXPECT_EQ(shell(*dir_, kBin + "tailor export " + qwen + " --format gguf --no-modelfile -o " + premade, nullptr, &err),
            0)
      << err;
  EXPECT_TRUE(fs::exists(premade));
  std::ifstream kept(dir_->file("premade.Modelfile"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "FROM ./elsewhere.gguf\n");
  EXPECT_EQ(shell(*dir_, kBin + "tailor export " + qwen + " --no-modelfile -o " + premade, nullptr, &err), 2);
  EXPECT_NE(err.find("--no-modelfile is for --format gguf"), std::string::npos) << err;

  // Gemma 2 scaling queries by query_pre_attn_scalar^-1/2 where llama.cpp
  // uses head_dim^-1/2.
  const std::string gemma = dir_->file("gemma-scalar");
  fs::copy(dir_->file("gemma2") + "/base", gemma);
  Json config = Json::parse(read_text(gemma + "/config.json"));
  config["query_pre_attn_scalar"] = 24;
  std::ofstream(gemma + "/config.json") << config.dump();
  EXPECT_EQ(shell(*dir_, kBin + "tailor-runner export " + gemma + " --format gguf -o " + file, nullptr, &err), 1);
  EXPECT_NE(err.find("query_pre_attn_scalar 24 differs from head_dim 32"), std::string::npos) << err;
  // A tokenizer llama.cpp has no pre-tokenizer for.
  const std::string odd = dir_->file("odd-tokenizer");
  fs::copy(qwen, odd);
  Json tok = Json::parse(read_text(odd + "/tokenizer.json"));
  tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+|\\S+";
  std::ofstream(odd + "/tokenizer.json") << tok.dump();
  EXPECT_EQ(shell(*dir_, kBin + "tailor-runner export " + odd + " --format gguf -o " + file, nullptr, &err), 1);
  EXPECT_NE(err.find("is not one llama.cpp names"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(fs::exists(file + ".tmp"));

  // Mistral's sliding window, which llama.cpp's "llama" ignores: written, and said.
  const std::string windowed = dir_->file("mistral-window");
  fs::copy(dir_->file("mistral") + "/base", windowed);
  config = Json::parse(read_text(windowed + "/config.json"));
  config["sliding_window"] = 8;
  std::ofstream(windowed + "/config.json") << config.dump();
  ASSERT_EQ(shell(*dir_, kBin + "tailor-runner export " + windowed + " --format gguf -o " + file + " --output json", &out, &err), 0)
      << err;
  const Json j = Json::parse(out);
  ASSERT_EQ(j["warnings"].size(), 1u) << j.dump();
  EXPECT_NE(j["warnings"][0].get<std::string>().find("sliding_window 8: llama.cpp's llama architecture attends to the whole context"),
            std::string::npos);
  // Replacing needs --force; the text summary says the warning too.
  EXPECT_EQ(shell(*dir_, kBin + "tailor-runner export " + windowed + " --format gguf -o " + file, nullptr, &err), 1);
  EXPECT_NE(err.find("exists; choose another file, or give --force"), std::string::npos) << err;
  ASSERT_EQ(shell(*dir_, kBin + "tailor export " + windowed + " --format gguf -o " + file + " --force", nullptr, &err), 0);
  EXPECT_NE(err.find("as GGUF f16 (llama, 21 tensors"), std::string::npos) << err;
  EXPECT_NE(err.find("warning: sliding_window 8"), std::string::npos) << err;
}

// llama.cpp's own quantizer (llama_model_quantize, in the library
// llama-cpp-python built) behind llama-quantize's command line: IN OUT TYPE.
std::string write_llama_quantize(const TempDir& dir) {
  const std::string path = dir.file("bin/llama-quantize");
  fs::create_directories(dir.file("bin"));
  std::ofstream(path) << "#!" << TAILOR_SOURCE_DIR << "/.venv/bin/python\n"
                      << "import ctypes, sys\nimport llama_cpp\n"
                      << "src, dst, kind = sys.argv[1:4]\n"
                      << "ftype = getattr(llama_cpp, 'LLAMA_FTYPE_MOSTLY_' + kind.upper(), None)\n"
                      << "if ftype is None:\n    sys.exit(f'invalid file type {kind}')\n"
                      << "params = llama_cpp.llama_model_quantize_default_params()\n"
                      << "params.ftype = ftype\n"
                      << "sys.exit(llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)))\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

TEST_F(GgufExportTest, QuantizeHandsTheExportToLlamaQuantizeAndLlamaCppLoadsTheResult) {
  ASSERT_TRUE(made_);
  const std::string tool = write_llama_quantize(*dir_), d = dir_->file("qwen2");
  const std::string file = dir_->file("quantized/qwen2-q4_k_m.gguf");
  std::string out, err;
  ASSERT_EQ(shell(*dir_, "TAILOR_LLAMA_QUANTIZE=" + tool + " " + kBin + "tailor-runner export " + d + "/base --adapter " + d +
                             "/adapter --format gguf --quantize Q4_K_M -o " + file + " --output json",
                  &out, &err),
            0)
      << err;
  const Json j = Json::parse(out);
  EXPECT_EQ(j["quantize"], "Q4_K_M");
  EXPECT_EQ(j["outtype"], "f16");
  EXPECT_EQ(j["bytes"].get<std::uintmax_t>(), fs::file_size(file));
  // Only the file and its Modelfile: not the f16 input, the temporary
  // output or the log.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_->file("quantized"))) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"qwen2-q4_k_m.Modelfile", "qwen2-q4_k_m.gguf"}));
  EXPECT_EQ(j["modelfile"], dir_->file("quantized/qwen2-q4_k_m.Modelfile"));
  EXPECT_TRUE(venv_script(*dir_, "gguf_reference.py", "quantized " + file + " " + d + " 15", /*echo=*/true));

  // A type llama-quantize does not know: its own words, and nothing written.
  const std::string bad = dir_->file("quantized/bad.gguf");
  EXPECT_EQ(shell(*dir_, "TAILOR_LLAMA_QUANTIZE=" + tool + " " + kBin + "tailor-runner export " + d +
                             "/base --format gguf --quantize Q9_X -o " + bad,
                  nullptr, &err),
            5);
  EXPECT_NE(err.find("exited 1"), std::string::npos) << err;
  EXPECT_NE(err.find("invalid file type Q9_X"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(bad));
  EXPECT_FALSE(fs::exists(bad + ".tmp"));
  EXPECT_FALSE(fs::exists(bad + ".unquantized.gguf"));
  EXPECT_FALSE(fs::exists(dir_->file("quantized/bad.Modelfile")));
  EXPECT_EQ(shell(*dir_, kBin + "tailor-runner export " + d + "/base --format gguf --outtype q8_0 --quantize Q4_K_M -o " + bad,
                  nullptr, &err),
            2);
  EXPECT_NE(err.find("--quantize starts from an f16, bf16 or f32 file"), std::string::npos) << err;
}

}  // namespace
}  // namespace tailor::runner
