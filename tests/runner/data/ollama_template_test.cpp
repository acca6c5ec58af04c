// Chat templates as Ollama templates: the layouts derived from real
// templates, the refusals, the Modelfile's text; and every derived template
// rendered by Go's text/template as Ollama renders it, against jinja2 as
// transformers renders the chat template (ollama_reference.py).
#include "runner/data/ollama_template.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "runner/io/ollama_modelfile.h"

namespace tailor::runner::data {
namespace {

namespace fs = std::filesystem;

const fs::path kTemplates = fs::path(TAILOR_SOURCE_DIR) / "tests/runner/data/chat_templates";

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ChatJson special_tokens(const std::string& bos) {
  return {{"bos_token", bos}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}};
}

Result<OllamaTemplate> derive_from(const std::string& source, const std::string& bos = "<s>", bool add_bos = false) {
  TAILOR_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  OllamaTemplateOptions o;
  o.variables = special_tokens(bos);
  o.bos = bos;
  o.add_bos = add_bos;
  return ollama_template(t, o);
}

Result<OllamaTemplate> derive_file(const std::string& name, const std::string& bos = "<s>", bool add_bos = false) {
  return derive_from(file_text(kTemplates / name), bos, add_bos);
}

bool has_note(const OllamaTemplate& t, const std::string& words) {
  for (const std::string& n : t.notes) {
    if (n.find(words) != std::string::npos) return true;
  }
  return false;
}

TEST(OllamaTemplateTest, QwenChatMlWritesItsDefaultSystemTurnOnlyWhenTheFirstMessageIsNotASystemOne) {
  auto t = derive_file("llamacpp_Qwen-Qwen2.5-7B-Instruct.jinja");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_NE(t->text.find("{{- if and (eq $i 0) (ne .Role \"system\") }}<|im_start|>system\nYou are Qwen"),
            std::string::npos)
      << t->text;
  EXPECT_NE(t->text.find("{{ if $last }}<|im_start|>assistant\n{{ end }}"), std::string::npos) << t->text;
  EXPECT_EQ(t->stops, (std::vector<std::string>{"<|im_end|>", "<|im_start|>user"}));
}

TEST(OllamaTemplateTest, TheBosLlamaCppWritesIsLeftOutOfTheTemplate) {
  const std::string bos = "<|begin_of_text|>";
  auto with = derive_file("llamacpp_meta-llama-Llama-3.1-8B-Instruct.jinja", bos, /*add_bos=*/true);
  ASSERT_TRUE(with.is_ok()) << with.status().message();
  EXPECT_EQ(with->text.find(bos), std::string::npos) << with->text;
  auto without = derive_file("llamacpp_meta-llama-Llama-3.1-8B-Instruct.jinja", bos, /*add_bos=*/false);
  ASSERT_TRUE(without.is_ok()) << without.status().message();
  EXPECT_NE(without->text.find(bos), std::string::npos) << without->text;
  // Llama 3.1 trims each message; a Go template cannot, and says so.
  EXPECT_TRUE(has_note(*with, "trims each message")) << with->notes.front();
}

TEST(OllamaTemplateTest, ATemplateThatRefusesSystemMessagesGetsThemAtTheHeadOfTheFirstUserTurn) {
  auto t = derive_file("trl_gemma.jinja", "<bos>", /*add_bos=*/true);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_TRUE(has_note(*t, "refuses a system message"));
  EXPECT_NE(t->text.find("{{ if $system }}{{ $system }}\n\n{{ $system = \"\" }}{{ end }}"), std::string::npos)
      << t->text;
  EXPECT_EQ(t->stops, (std::vector<std::string>{"<end_of_turn>", "<start_of_turn>user"}));
}

// meta-llama/Llama-2-7b-chat-hf's template.
constexpr const char* kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

TEST(OllamaTemplateTest, Llama2FoldsTheSystemIntoTheFirstTurnAndWritesBosBeforeEachLaterOne) {
  auto t = derive_from(kLlama2, "<s>", /*add_bos=*/true);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_NE(t->text.find("{{ if not $first }}<s>{{ end }}[INST] "), std::string::npos) << t->text;
  EXPECT_NE(t->text.find("{{ if $system }}<<SYS>>\n{{ $system }}\n<</SYS>>\n\n"), std::string::npos) << t->text;
}

TEST(OllamaTemplateTest, ATemplateThatRewritesEarlierTurnsIsRefusedSayingWhy) {
  // The system text goes into the last user turn (Mistral's v0.3 way):
  // where it lands moves as the conversation grows.
  const std::string last_user =
      "{% for m in messages %}{% if m.role == 'user' %}[INST] {% if loop.last and messages[0].role == 'system' %}"
      "{{ messages[0].content }}\n\n{% endif %}{{ m.content }}[/INST]{% elif m.role == 'assistant' %}{{ m.content }}"
      "</s>{% endif %}{% endfor %}";
  auto t = derive_from(last_user);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("the chat template has no Ollama template: "), std::string::npos);
  EXPECT_NE(t.status().message().find("system"), std::string::npos) << t.status().message();

  // The excerpt of where the renderings part is on one line (a Modelfile
  // comment carries it).
  EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status().message();

  auto raises = derive_from("{{ raise_exception('no') }}");
  ASSERT_FALSE(raises.is_ok());
  EXPECT_NE(raises.status().message().find("it raises on a plain conversation: "), std::string::npos)
      << raises.status().message();
}

TEST(OllamaTemplateTest, BracesTheTemplateWritesAreGoLiteralsNotActions) {
  auto t = derive_from(
      "{% for m in messages %}{{ '{{' + m.role + '}} ' + m.content + '\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '{{assistant}} ' }}{% endif %}");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_NE(t->text.find("{{ \"{{\" }}user}} {{ .Content }}\n"), std::string::npos) << t->text;
  // A brace right before the message: "{" then "{{ .Content }}" would read
  // as "{{{".
  auto braced = derive_from(
      "{% for m in messages %}{{ m.role + ': {' + m.content + '}\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ 'assistant: {' }}{% endif %}");
  ASSERT_TRUE(braced.is_ok()) << braced.status().message();
  EXPECT_NE(braced->text.find("user: {{ \"{\" }}{{ .Content }}}\n"), std::string::npos) << braced->text;
}

TEST(OllamaModelfileTest, ValuesAreQuotedAsOllamasParserReadsThemBack) {
  io::Modelfile m;
  m.comments = {"written by a test"};
  m.from = "./model f16.gguf";
  m.template_text = "{{ .Prompt }}";
  m.parameters = {
      {"stop", "<|im_end|>"}, {"stop", "<|start_header_id|>user<|end_header_id|>\n\n"}, {"temperature", "0.7"}};
  auto text = io::modelfile_text(m);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_EQ(*text,
            "# written by a test\n"
            "FROM \"./model f16.gguf\"\n"
            "TEMPLATE \"\"\"{{ .Prompt }}\"\"\"\n"
            "PARAMETER stop <|im_end|>\n"
            "PARAMETER stop \"\"\"<|start_header_id|>user<|end_header_id|>\n\n\"\"\"\n"
            "PARAMETER temperature 0.7\n");
}

TEST(OllamaModelfileTest, TextTheParserWouldChangeIsRefusedByName) {
  io::Modelfile m;
  m.from = "./m.gguf";
  m.template_text = "a \"\"\" b";
  auto quotes = io::modelfile_text(m);
  ASSERT_FALSE(quotes.is_ok());
  EXPECT_NE(quotes.status().message().find("\"\"\""), std::string::npos);
  m.template_text = "bell \x07";
  auto control = io::modelfile_text(m);
  ASSERT_FALSE(control.is_ok());
  EXPECT_NE(control.status().message().find("U+0007"), std::string::npos) << control.status().message();
  m.template_text = "zero\xE2\x80\x8Bwidth";
  auto invisible = io::modelfile_text(m);
  ASSERT_FALSE(invisible.is_ok());
  EXPECT_NE(invisible.status().message().find("U+200B"), std::string::npos) << invisible.status().message();
  m.template_text = "Grüße, 你好, <｜User｜>";
  EXPECT_TRUE(io::modelfile_text(m).is_ok());
}

TEST(OllamaModelfileTest, SamplingDefaultsComeFromGenerationConfig) {
  const fs::path dir = fs::temp_directory_path() / ("tailor-modelfile-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_TRUE(io::ollama_sampling_parameters(dir.string()).empty());
  std::ofstream(dir / "generation_config.json")
      << R"({"do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05})";
  using Params = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(
      io::ollama_sampling_parameters(dir.string()),
      (Params{
          {"temperature", "0.7"}, {"top_p", "0.8"}, {"top_k", "20"}, {"min_p", "0.05"}, {"repeat_penalty", "1.05"}}));
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": false, "temperature": 0.7})";
  EXPECT_EQ(io::ollama_sampling_parameters(dir.string()), (Params{{"temperature", "0"}}));
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": 2})";
  EXPECT_TRUE(io::ollama_sampling_parameters(dir.string()).empty());
  fs::remove_all(dir);
}

// ---- against Go's text/template and jinja2

// Conversations of their own, unlike the ones the derivation checks.
ChatJson reference_conversations() {
  auto turn = [](const char* role, const std::string& content) {
    return ChatJson{{"role", role}, {"content", content}};
  };
  const std::string sys = "You speak French.\nKeep it short.";
  const std::string q1 = "Bonjour ! Où est la gare ?", a1 = "Tout droit, puis à gauche.\n\n— Merci.";
  const std::string q2 = "Et le musée ? {braces} <tags> \"quotes\"", a2 = "Fermé le lundi.", q3 = "Merci 🙂";
  ChatJson out = ChatJson::array();
  auto add = [&](std::vector<ChatJson> messages, bool continued) {
    out.push_back({{"messages", messages}, {"continued", continued}});
  };
  add({turn("user", q1)}, false);
  add({turn("user", q1), turn("assistant", a1), turn("user", q2)}, false);
  add({turn("user", q1), turn("assistant", a1), turn("user", q2), turn("assistant", a2), turn("user", q3)}, false);
  add({turn("user", q1), turn("assistant", a1), turn("user", q2), turn("assistant", a2)}, true);
  add({turn("system", sys), turn("user", q1)}, false);
  add({turn("system", sys), turn("user", q1), turn("assistant", a1), turn("user", q2)}, false);
  add({turn("system", sys), turn("user", q1), turn("assistant", a1)}, true);
  return out;
}

TEST(OllamaReferenceTest, EveryDerivedTemplateRendersInGoAsTheChatTemplateDoesInJinja2) {
  const fs::path dir = fs::temp_directory_path() / ("tailor-ollama-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const ChatJson conversations = reference_conversations();
  ChatJson cases = ChatJson::array();
  std::set<std::string> derived;
  std::map<std::string, std::string> refused;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kTemplates)) {
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::pair<std::string, std::string>> sources;
  for (const fs::path& f : files)
    sources.emplace_back(f.filename().string(), file_text(f));
  // Braces the template writes around a message, which Go must not read as
  // actions.
  sources.emplace_back("braces (synthetic)",
                       "{% for m in messages %}{{ '{{' + m.role + '}} {' + m.content + '}\\n' }}{% endfor %}"
                       "{% if add_generation_prompt %}{{ '{{assistant}} {' }}{% endif %}");
  for (const auto& [file, source] : sources) {
    for (bool add_bos : {false, true}) {
      auto t = derive_from(source, "<s>", add_bos);
      const std::string name = file + (add_bos ? " (BOS by llama.cpp)" : "");
      if (!t.is_ok()) {
        refused[file] = t.status().message();
        continue;
      }
      derived.insert(file);
      ChatJson c = {{"name", name}, {"source", source},   {"variables", special_tokens("<s>")},
                    {"bos", "<s>"}, {"add_bos", add_bos}, {"go", t->text}};
      c["conversations"] = conversations;
      cases.push_back(c);
    }
  }
  std::printf("%zu of %zu templates have an Ollama template; refused:\n", derived.size(), sources.size());
  for (const auto& [name, why] : refused)
    std::printf("  %s: %s\n", name.c_str(), why.c_str());
  // The templates of the families GGUF export takes.
  for (const char* name :
       {"llamacpp_Qwen-Qwen2.5-7B-Instruct.jinja", "llamacpp_meta-llama-Llama-3.1-8B-Instruct.jinja",
        "llamacpp_meta-llama-Llama-3.2-3B-Instruct.jinja", "llamacpp_google-gemma-2-2b-it.jinja", "trl_gemma3.jinja",
        "llamacpp_microsoft-Phi-3.5-mini-instruct.jinja", "chujiezheng_mistral-instruct.jinja", "trl_qwen2_5.jinja",
        "chujiezheng_chatml.jinja", "llamacpp_Qwen-Qwen3-0.6B.jinja", "trl_qwen3.jinja", "braces (synthetic)"}) {
    EXPECT_TRUE(derived.count(name)) << name << ": " << refused[name];
  }

  std::ofstream(dir / "cases.json") << cases.dump();
  // Go's objects cached in the build folder.
  const std::string cmd = "TAILOR_GOCACHE=" + std::string(TAILOR_BINARY_DIR) + "/go-cache " + TAILOR_SOURCE_DIR +
                          "/.venv/bin/python " + TAILOR_SOURCE_DIR + "/tests/runner/data/ollama_reference.py " +
                          (dir / "cases.json").string() + " " + (dir / "out.json").string() + " > " +
                          (dir / "python.log").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd << "\n" << file_text(dir / "python.log");
  const ChatJson out = ChatJson::parse(file_text(dir / "out.json"));
  int compared = 0, skipped = 0;
  for (const ChatJson& r : out["results"]) {
    const std::string where =
        r["name"].get<std::string>() + ", conversation " + std::to_string(r["conversation"].get<int>());
    if (r.contains("error")) {
      const std::string error = r["error"];
      // A template that refuses a conversation (Gemma 2 and a system
      // message) has nothing to compare; Go never fails.
      EXPECT_EQ(error.find("go:"), std::string::npos) << where << ": " << error;
      ++skipped;
      continue;
    }
    EXPECT_EQ(r["go"].get<std::string>(), r["jinja"].get<std::string>()) << where;
    ++compared;
  }
  std::printf("%d renderings equal in Go and jinja2 (%d conversations jinja2 refuses)\n", compared, skipped);
  EXPECT_GT(compared, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tailor::runner::data
