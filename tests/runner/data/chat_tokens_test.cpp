// Conversations as training tokens (runner/data/chat_tokens.h) against
// transformers' apply_chat_template (chat_tokens_reference.py in .venv):
// tokenizers trained by the `tokenizers` library with the special tokens of
// Llama 3, ChatML and Phi-3; 60 conversations per template. Ids are equal
// for every case; on templates with {% generation %} blocks the trained
// tokens equal return_assistant_tokens_mask; on their originals, without
// the blocks, the turns found by marker alignment train the same tokens
// (Llama 3 exactly, the others up to the whitespace TRL's blocks also wrap).
#include "runner/data/chat_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dsl/chat_records.h"
#include "runner/data/bpe_tokenizer.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/dataset.h"
#include "runner/data/pair_tokens.h"
#include "runner/data/tokenizer.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::data {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string template_file(const std::string& name) {
  return std::string(TAILOR_SOURCE_DIR) + "/tests/runner/data/chat_templates/" + name;
}

// The reference, made once for the whole suite (about 6 s).
class ChatTokensReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new tailor::testing::TempDir();
    const std::string cmd = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python " + TAILOR_SOURCE_DIR +
                            "/tests/runner/data/chat_tokens_reference.py " + dir_->path().string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    ref_ = new ChatJson(ChatJson::parse(read_text(dir_->file("reference.json"))));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }

  static ChatSetup setup(const std::string& family, const std::string& name,
                         dsl::TrainOn on = dsl::TrainOn::kAssistant, dsl::TrainOnEos eos = dsl::TrainOnEos::kTurn) {
    dsl::DataSpec data;
    data.chat = dsl::ChatFormat::kMessages;
    // A template the reference made (a {% generation %} version) lies beside it.
    data.chat_template = std::filesystem::exists(dir_->file(name)) ? dir_->file(name) : template_file(name);
    data.train_on = on;
    data.train_on_eos = eos;
    auto s = load_chat_setup(data, folder(family));
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return std::move(s).value();
  }
  static std::string folder(const std::string& family) { return (*ref_)["families"][family]["folder"]; }
  // The folder's tokenizer as a job reads it: byte-level BPE, or
  // SentencePiece-style BPE (llama2, gemma).
  static std::unique_ptr<Tokenizer> tokenizer(const std::string& family) {
    dsl::ModelSpec model;
    model.path = folder(family);
    model.arch.vocab = 1000;
    auto t = make_tokenizer(model);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return std::move(t).value();
  }
  static std::string conversation(std::size_t i) {
    return ChatJson{{"messages", (*ref_)["conversations"][i]}}.dump();
  }
  static const ChatJson& cases(const std::string& family, const std::string& name) {
    return (*ref_)["families"][family]["cases"][name];
  }

  static tailor::testing::TempDir* dir_;
  static ChatJson* ref_;
};
tailor::testing::TempDir* ChatTokensReference::dir_ = nullptr;
ChatJson* ChatTokensReference::ref_ = nullptr;

TEST_F(ChatTokensReference, IdsEqualApplyChatTemplateForEveryTemplateAndConversation) {
  std::size_t compared = 0, tokens = 0;
  for (const auto& [family, f] : (*ref_)["families"].items()) {
    const auto tok = tokenizer(family);
    for (const auto& [name, rows] : f["cases"].items()) {
      SCOPED_TRACE(family + " " + name);
      const ChatSetup s = setup(family, name);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        auto ex = tokenize_chat(s, *tok, conversation(i));
        ASSERT_TRUE(ex.is_ok()) << i << ": " << ex.status().to_string();
        EXPECT_EQ(ex->text, rows[i]["text"].get<std::string>()) << i;
        EXPECT_EQ(ex->ids, rows[i]["ids"].get<std::vector<std::int32_t>>()) << i;
        ++compared;
        tokens += ex->ids.size();
      }
    }
  }
  EXPECT_EQ(compared, 15u * 60u);
  EXPECT_GT(tokens, 30000u);
}

TEST_F(ChatTokensReference, GenerationBlocksTrainWhatReturnAssistantTokensMaskMarks) {
  for (const auto& [family, name] :
       std::vector<std::pair<std::string, std::string>>{{"llama3", "trl_llama3_training.jinja"},
                                                        {"qwen2", "trl_qwen2_5_training.jinja"},
                                                        {"phi3", "trl_phi3_training.jinja"},
                                                        {"llama2", "llama2_training.jinja"},
                                                        {"gemma", "trl_gemma3_training.jinja"}}) {
    SCOPED_TRACE(name);
    const auto tok = tokenizer(family);
    const ChatSetup s = setup(family, name);
    const ChatJson& rows = cases(family, name);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto ex = tokenize_chat(s, *tok, conversation(i));
      ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
      EXPECT_TRUE(ex->generation_markers);
      std::vector<std::uint8_t> expected = rows[i]["mask"].get<std::vector<std::uint8_t>>();
      ASSERT_EQ(expected.size(), ex->trained.size());
      EXPECT_EQ(expected[0], 0);
      EXPECT_EQ(ex->trained, expected) << i << "\n" << ex->text;
    }
  }
}

// The originals have no {% generation %} blocks: marker alignment finds
// the assistant turns, and the end-of-turn token after each is trained.
TEST_F(ChatTokensReference, MarkerAlignmentTrainsTheTokensTheGenerationBlocksWrap) {
  for (const auto& [family, plain, training] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"llama3", "trl_llama3.jinja", "trl_llama3_training.jinja"},
           {"qwen2", "trl_qwen2_5.jinja", "trl_qwen2_5_training.jinja"},
           {"phi3", "trl_phi3.jinja", "trl_phi3_training.jinja"},
           {"llama2", "chujiezheng_llama-2-chat.jinja", "llama2_training.jinja"},
           {"gemma", "trl_gemma3.jinja", "trl_gemma3_training.jinja"}}) {
    SCOPED_TRACE(plain);
    const auto tok = tokenizer(family);
    const ChatSetup s = setup(family, plain);
    const ChatJson& rows = cases(family, training);
    std::size_t equal = 0, whitespace_only = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto ex = tokenize_chat(s, *tok, conversation(i));
      ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
      EXPECT_FALSE(ex->generation_markers);
      const auto expected = rows[i]["mask"].get<std::vector<std::uint8_t>>();
      ASSERT_EQ(expected.size(), ex->trained.size());
      if (ex->trained == expected) {
        ++equal;
        continue;
      }
      // Ours is within theirs, and what only they train is whitespace
      // (TRL's ChatML and Phi-3 blocks wrap the newlines around a reply).
      for (std::size_t t = 0; t < expected.size(); ++t) {
        if (ex->trained[t] == expected[t]) continue;
        EXPECT_EQ(ex->trained[t], 0) << i << " token " << t;
        const std::string piece = tok->decode({ex->ids[t]});
        EXPECT_EQ(piece.find_first_not_of(" \n"), std::string::npos) << i << " token " << t << " " << piece;
      }
      ++whitespace_only;
    }
    if (family == "llama3") {
      EXPECT_EQ(equal, rows.size());
    }
    EXPECT_EQ(equal + whitespace_only, rows.size());
  }
}

std::vector<std::size_t> trained_positions(const ChatExample& ex) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < ex.trained.size(); ++i) {
    if (ex.trained[i]) out.push_back(i);
  }
  return out;
}

TEST_F(ChatTokensReference, TrainOnAndTrainOnEosChooseTheTrainedTurnsAndTheirEnds) {
  const auto tok = tokenizer("llama3");
  const std::size_t conv = 7;  // several assistant turns
  ASSERT_GE((*ref_)["conversations"][conv].size(), 6u);
  auto run = [&](dsl::TrainOn on, dsl::TrainOnEos eos) {
    auto ex = tokenize_chat(setup("llama3", "trl_llama3.jinja", on, eos), *tok, conversation(conv));
    EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
    return std::move(ex).value();
  };
  const ChatExample turn = run(dsl::TrainOn::kAssistant, dsl::TrainOnEos::kTurn);
  const ChatExample none = run(dsl::TrainOn::kAssistant, dsl::TrainOnEos::kNone);
  const ChatExample last = run(dsl::TrainOn::kAssistant, dsl::TrainOnEos::kLast);
  const ChatExample all = run(dsl::TrainOn::kAll, dsl::TrainOnEos::kTurn);
  const ChatExample last_turn = run(dsl::TrainOn::kLastAssistant, dsl::TrainOnEos::kTurn);
  const std::int32_t eot = turn.ids.back();  // the conversation ends with an assistant turn's <|eot_id|>
  ASSERT_TRUE(tok->is_special(eot));
  auto count_eot = [&](const ChatExample& ex) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < ex.ids.size(); ++i) n += ex.ids[i] == eot && ex.trained[i];
    return n;
  };
  const std::size_t assistants = (*ref_)["conversations"][conv].size() / 2;
  EXPECT_EQ(count_eot(turn), assistants);
  EXPECT_EQ(count_eot(none), 0u);
  EXPECT_EQ(count_eot(last), 1u);
  EXPECT_EQ(trained_positions(turn).size(), trained_positions(none).size() + assistants);
  EXPECT_EQ(trained_positions(all).size(), all.ids.size() - 1);
  // The last turn alone: a tail of the assistant-trained tokens.
  const auto every = trained_positions(turn), tail = trained_positions(last_turn);
  ASSERT_LT(tail.size(), every.size());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), every.end() - static_cast<std::ptrdiff_t>(tail.size())));
  EXPECT_EQ(count_eot(last_turn), 1u);
}

// Prompt-completion records as TRL's SFTTrainer tokenizes them on the
// SentencePiece-style folders: the two texts encoded together, so that a
// completion starting mid-line ("4" after "2+2=") gains no word-start "▁".
TEST_F(ChatTokensReference, PromptCompletionRowsEqualTrlsSftTrainerOnSentencePieceFolders) {
  for (const std::string family : {"llama2", "gemma"}) {
    SCOPED_TRACE(family);
    const auto tok = tokenizer(family);
    const ChatJson& trl = (*ref_)["families"][family]["trl"];
    std::string lines;
    for (const ChatJson& r : trl["records"])
      lines += r.dump() + "\n";
    tailor::testing::TempDir dir;
    dsl::DataSpec spec;
    spec.format = dsl::DataFormat::kJsonl;
    spec.prompt_field = "prompt";
    spec.completion_field = "completion";
    auto examples = load_examples(dir.write("records.jsonl", lines), spec, *tok);
    ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
    ASSERT_EQ(examples->size(), trl["sft"].size());
    ASSERT_GE(examples->size(), 10u);
    std::size_t apart_differs = 0;
    for (std::size_t i = 0; i < examples->size(); ++i) {
      const Example& ex = (*examples)[i];
      EXPECT_EQ(ex.tokens, trl["sft"][i]["input_ids"].get<std::vector<std::int32_t>>()) << i;
      EXPECT_EQ(ex.trained, trl["sft"][i]["trained"].get<std::vector<std::uint8_t>>()) << i;
      const auto completion = tok->encode(trl["records"][i]["completion"].get<std::string>());
      const auto first = std::find(ex.trained.begin(), ex.trained.end(), 1) - ex.trained.begin();
      apart_differs += completion.front() != ex.tokens[static_cast<std::size_t>(first)];
    }
    // Encoded apart, some completions would have started otherwise (Llama 2's
    // "▁" before them); Gemma's tokenizer adds none.
    if (family == "llama2") {
      EXPECT_GE(apart_differs, 3u);
    }
  }
}

// Preference pairs of strings as TRL's DPOTrainer tokenizes them on the same
// folders: prompt_ids the ids both prompt + completion encodings share with
// the prompt alone, then each completion's and EOS; and as its KTOTrainer
// does (data.unpaired), each row's prompt the ids that row shares.
TEST_F(ChatTokensReference, PreferencePairsEqualTrlsDpoAndKtoTrainersOnSentencePieceFolders) {
  for (const std::string family : {"llama2", "gemma"}) {
    SCOPED_TRACE(family);
    const auto tok = tokenizer(family);
    const ChatJson& trl = (*ref_)["families"][family]["trl"];
    ASSERT_EQ(trl["pairs"].size(), trl["dpo"].size());
    ASSERT_EQ(trl["pairs"].size(), trl["kto"].size());
    ASSERT_GE(trl["pairs"].size(), 12u);
    auto expect_row = [](const PairRow& row, const ChatJson& prompt_ids, const ChatJson& completion_ids) {
      std::vector<std::int32_t> ids = prompt_ids.get<std::vector<std::int32_t>>();
      std::vector<std::uint8_t> trained(ids.size(), 0);
      const auto completion = completion_ids.get<std::vector<std::int32_t>>();
      ids.insert(ids.end(), completion.begin(), completion.end());
      trained.resize(ids.size(), 1);
      EXPECT_EQ(row.ids, ids);
      EXPECT_EQ(row.trained, trained);
    };
    std::size_t rows_apart = 0;
    for (const bool unpaired : {false, true}) {
      dsl::DataSpec spec;
      spec.preference = true;
      spec.unpaired = unpaired;
      spec.seq_len = 512;
      for (std::size_t i = 0; i < trl["pairs"].size(); ++i) {
        SCOPED_TRACE(std::to_string(i) + (unpaired ? " kto" : " dpo"));
        const std::string prompt = trl["pairs"][i]["prompt"], chosen = trl["pairs"][i]["chosen"],
                          rejected = trl["pairs"][i]["rejected"];
        dsl::DataRecord r;
        r.prompt = prompt;
        r.chosen = chosen;
        r.rejected = rejected;
        auto pair = tokenize_pair(r, spec, *tok, nullptr);
        ASSERT_TRUE(pair.is_ok()) << pair.status().to_string();
        if (unpaired) {
          const ChatJson& kto = trl["kto"][i];
          expect_row(pair->chosen, kto["chosen"]["prompt_ids"], kto["chosen"]["completion_ids"]);
          expect_row(pair->rejected, kto["rejected"]["prompt_ids"], kto["rejected"]["completion_ids"]);
          rows_apart += kto["chosen"]["prompt_ids"].size() != kto["rejected"]["prompt_ids"].size();
        } else {
          const ChatJson& dpo = trl["dpo"][i];
          expect_row(pair->chosen, dpo["prompt_ids"], dpo["chosen_ids"]);
          expect_row(pair->rejected, dpo["prompt_ids"], dpo["rejected_ids"]);
        }
      }
    }
    // Pairs whose rows leave the prompt at different places tell the two apart.
    EXPECT_GE(rows_apart, 2u);
  }
}

// ---- where the template comes from

TEST(ChatTemplateSourceTest, DataChatTemplateThenTheFoldersJinjaThenTokenizerConfig) {
  tailor::testing::TempDir dir;
  dsl::DataSpec data;
  data.chat = dsl::ChatFormat::kMessages;
  const std::string folder = dir.path().string();
  {
    std::ofstream(dir.file("tokenizer_config.json"))
        << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": "from config {{ bos_token }}"})";
  }
  auto setup = load_chat_setup(data, folder);
  ASSERT_TRUE(setup.is_ok()) << setup.status().to_string();
  EXPECT_EQ(setup->template_text, "from config {{ bos_token }}");
  EXPECT_NE(setup->origin.find("tokenizer_config.json"), std::string::npos);
  EXPECT_EQ(setup->variables["bos_token"], "<s>");
  EXPECT_EQ(setup->variables["eos_token"], "</s>");
  { std::ofstream(dir.file("chat_template.jinja")) << "from jinja"; }
  setup = load_chat_setup(data, folder);
  ASSERT_TRUE(setup.is_ok());
  EXPECT_EQ(setup->template_text, "from jinja");
  { std::ofstream(dir.file("mine.jinja")) << "mine"; }
  data.chat_template = dir.file("mine.jinja");
  setup = load_chat_setup(data, folder);
  ASSERT_TRUE(setup.is_ok());
  EXPECT_EQ(setup->template_text, "mine");
  EXPECT_EQ(setup->origin, dir.file("mine.jinja"));
}

TEST(ChatTemplateSourceTest, ANamedListUsesDefaultAndNoTemplateListsThePlacesLookedAt) {
  tailor::testing::TempDir dir;
  dsl::DataSpec data;
  data.chat = dsl::ChatFormat::kMessages;
  {
    std::ofstream(dir.file("tokenizer_config.json"))
        << R"({"chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]})";
  }
  auto setup = load_chat_setup(data, dir.path().string());
  ASSERT_TRUE(setup.is_ok()) << setup.status().to_string();
  EXPECT_EQ(setup->template_text, "d");
  { std::ofstream(dir.file("tokenizer_config.json")) << R"({"chat_template": [{"name": "rag", "template": "r"}]})"; }
  setup = load_chat_setup(data, dir.path().string());
  ASSERT_FALSE(setup.is_ok());
  EXPECT_NE(setup.status().message().find("\"rag\""), std::string::npos) << setup.status().message();
  { std::ofstream(dir.file("tokenizer_config.json")) << R"({"eos_token": "</s>"})"; }
  setup = load_chat_setup(data, dir.path().string());
  ASSERT_FALSE(setup.is_ok());
  const std::string m = setup.status().message();
  EXPECT_NE(m.find("data.chat_template is not set"), std::string::npos) << m;
  EXPECT_NE(m.find("chat_template.jinja does not exist"), std::string::npos) << m;
  EXPECT_NE(m.find("has no chat_template"), std::string::npos) << m;
  setup = load_chat_setup(data, "");
  ASSERT_FALSE(setup.is_ok());
  EXPECT_NE(setup.status().message().find("data.chat_template must name"), std::string::npos);
}

TEST(ChatTemplateSourceTest, ASyntaxErrorNamesTheFileAndTheLine) {
  tailor::testing::TempDir dir;
  { std::ofstream(dir.file("bad.jinja")) << "line one\n{% if %}"; }
  dsl::DataSpec data;
  data.chat = dsl::ChatFormat::kMessages;
  data.chat_template = dir.file("bad.jinja");
  auto setup = load_chat_setup(data, "");
  ASSERT_FALSE(setup.is_ok());
  EXPECT_NE(setup.status().message().find(dir.file("bad.jinja") + ": chat template 2:"), std::string::npos)
      << setup.status().message();
}

// ---- a JSONL of conversations through the dataset, with the byte tokenizer

ChatSetup byte_setup(const std::string& source, dsl::TrainOn on = dsl::TrainOn::kAssistant) {
  auto t = ChatTemplate::parse(source);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return ChatSetup{std::move(t).value(), source, "test", ChatJson::object(), on, dsl::TrainOnEos::kTurn};
}

constexpr const char* kChatMl =
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}<|end|>\n{% endfor %}";

TEST(ChatTokensTest, AssistantTextIsTrainedAndTheUsersIsNot) {
  const ByteTokenizer tok;
  const ChatSetup s = byte_setup(kChatMl);
  const std::string conv =
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hi  "},
                       {"role": "assistant", "content": " Hello there "}]})";
  auto ex = tokenize_chat(s, tok, conv);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_EQ(ex->text, "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello there<|end|>\n");
  std::string trained;
  for (std::size_t i = 0; i < ex->ids.size(); ++i) {
    if (ex->trained[i]) trained += static_cast<char>(ex->ids[i]);
  }
  // The byte tokenizer has no special tokens: the text alone, no end-of-turn.
  EXPECT_EQ(trained, "Hello there");
  ASSERT_EQ(ex->trained_text.size(), 1u);
  EXPECT_EQ(ex->text.substr(ex->trained_text[0].first, ex->trained_text[0].second - ex->trained_text[0].first),
            "Hello there");
}

TEST(ChatTokensTest, ATemplateThatRaisesOrRewritesATurnIsAnErrorNamingIt) {
  const ByteTokenizer tok;
  const std::string conv = R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "A"}]})";
  auto raised = tokenize_chat(byte_setup("{{ raise_exception('roles must alternate') }}"), tok, conv);
  ASSERT_FALSE(raised.is_ok());
  EXPECT_NE(raised.status().message().find("roles must alternate"), std::string::npos);
  // The assistant's text upper-cased: not found where the template puts it.
  auto rewritten =
      tokenize_chat(byte_setup("{% for m in messages %}[{{ m.role }}]{{ m.content | upper }}.{% endfor %}"), tok, conv);
  ASSERT_FALSE(rewritten.is_ok());
  EXPECT_NE(rewritten.status().message().find("turn 1 (assistant)"), std::string::npos) << rewritten.status().message();
  EXPECT_NE(rewritten.status().message().find("{% generation %}"), std::string::npos);
  // The template drops the assistant's text.
  auto dropped = tokenize_chat(byte_setup("{% for m in messages %}[{{ m.role }}]{% endfor %}"), tok, conv);
  ASSERT_FALSE(dropped.is_ok());
  EXPECT_NE(dropped.status().message().find("does not write this turn's text"), std::string::npos)
      << dropped.status().message();
  // train_on: all needs no alignment.
  EXPECT_TRUE(tokenize_chat(byte_setup("{% for m in messages %}[{{ m.role }}]{{ m.content | upper }}.{% endfor %}",
                                       dsl::TrainOn::kAll),
                            tok, conv)
                  .is_ok());
}

TEST(ChatTokensTest, AJsonlOfConversationsIsOneWholeDocumentPerConversation) {
  tailor::testing::TempDir dir;
  {
    std::ofstream out(dir.file("chats.jsonl"));
    out << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})" << "\n";
    out << R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A1"},)"
        << R"( {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]})" << "\n";
  }
  dsl::DataSpec spec;
  spec.chat = dsl::ChatFormat::kMessages;
  spec.format = dsl::DataFormat::kJsonl;
  const ByteTokenizer tok;
  const ChatSetup s = byte_setup(kChatMl);
  auto examples = load_examples(dir.file("chats.jsonl"), spec, tok, &s);
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 2u);
  auto text_of = [](const Example& e, bool trained) {
    std::string t;
    for (std::size_t i = 0; i < e.tokens.size(); ++i) {
      if (!trained || e.trained[i]) t += static_cast<char>(e.tokens[i]);
    }
    return t;
  };
  EXPECT_EQ(text_of((*examples)[0], false), "<|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n");
  EXPECT_EQ(text_of((*examples)[1], true), "A1A2");
  // Without its template, chat data is refused rather than read as text.
  auto refused = load_examples(dir.file("chats.jsonl"), spec, tok, nullptr);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("chat template"), std::string::npos);
}

TEST(ChatTokensTest, OnBadRecordSkipLeavesOutConversationsTheTemplateRefuses) {
  tailor::testing::TempDir dir;
  const std::string path = dir.write(
      "chats.jsonl",
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})" "\n"
      R"({"messages": [{"role": "user", "content": "bad"}, {"role": "assistant", "content": "x"}]})" "\n"
      "{broken\n"
      R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]})" "\n");
  const ChatSetup s = byte_setup(
      "{% for m in messages %}{% if m.content == 'bad' %}{{ raise_exception('no bad words') }}{% endif %}"
      "<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}");
  dsl::DataSpec spec;
  spec.chat = dsl::ChatFormat::kMessages;
  spec.format = dsl::DataFormat::kJsonl;
  const ByteTokenizer tok;
  auto refused = tokenize_file(path, spec, tok, &s);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("chats.jsonl:2: "), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("no bad words"), std::string::npos) << refused.status().message();
  spec.on_bad_record = dsl::OnBadRecord::kSkip;
  SkippedRecords skipped;
  auto store = tokenize_file(path, spec, tok, &s, &skipped);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  EXPECT_EQ(store->documents(), 2u);
  EXPECT_EQ(skipped.count, 2);
  ASSERT_EQ(skipped.first.size(), 2u);
  EXPECT_NE(skipped.first[0].find("chats.jsonl:2: "), std::string::npos) << skipped.first[0];
  EXPECT_NE(skipped.first[1].find("chats.jsonl:3:"), std::string::npos) << skipped.first[1];
}

}  // namespace
}  // namespace tailor::runner::data
