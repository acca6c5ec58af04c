#include "dsl/data_records.h"

#include <sys/stat.h>

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace tailor::dsl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using tailor::testing::TempDir;

DataSpec spec_of(DataFormat format) {
  DataSpec spec;
  spec.format = format;
  return spec;
}

DataSpec pairs(DataFormat format) {
  DataSpec spec = spec_of(format);
  spec.prompt_field = "prompt";
  spec.completion_field = "completion";
  return spec;
}

// "line:prompt|text" for each record.
Result<std::vector<std::string>> records(std::string_view bytes, const DataSpec& spec,
                                         std::int64_t max_records = 0) {
  std::vector<std::string> out;
  const Status st = for_each_record(
      bytes, "d", spec,
      [&](const DataRecord& r) {
        EXPECT_EQ(r.where, "d:" + std::to_string(r.line));  // what errors and the preview name it by
        out.push_back(std::to_string(r.line) + ":" + std::string(r.prompt) + "|" + std::string(r.text));
        return Status::ok();
      },
      max_records);
  if (!st.is_ok()) return st;
  return out;
}

std::string error_of(std::string_view bytes, const DataSpec& spec) {
  const auto r = records(bytes, spec);
  EXPECT_FALSE(r.is_ok()) << "expected an error for: " << bytes;
  return r.is_ok() ? std::string() : r.status().message();
}

// ---- for_each_record ---------------------------------------------------------

TEST(DataRecordsTest, JsonArrayAndJsonLinesGiveTheSameRecordsAtTheirLines) {
  const std::string lines = "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"c\", \"completion\": \"d\"}\n";
  const std::string array = "\xEF\xBB\xBF[\n  {\"prompt\": \"a\", \"completion\": \"b\"},\n\n"
                            "  {\"prompt\": \"c\",\n   \"completion\": \"d\"}\n]\n";
  for (DataFormat f : {DataFormat::kJsonl, DataFormat::kJson}) {
    const auto r = records(lines, pairs(f));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_THAT(*r, ElementsAre("1:a|b", "3:c|d")) << to_string(f);
  }
  const auto r = records(array, pairs(DataFormat::kJson));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_THAT(*r, ElementsAre("2:a|b", "4:c|d"));
  // Strings holding the array's punctuation do not end an element.
  const auto tricky = records(R"([{"text": "a], {\"b\", ["}, {"text": "]"}])", spec_of(DataFormat::kJson));
  ASSERT_TRUE(tricky.is_ok()) << tricky.status().to_string();
  EXPECT_THAT(*tricky, ElementsAre("1:|a], {\"b\", [", "1:|]"));
  const auto empty = records("[ ]", spec_of(DataFormat::kJson));
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->empty());
}

TEST(DataRecordsTest, TextRecordsAreParagraphsAtTheirFirstLine) {
  const auto r = records("\nfirst\nsecond\n\n \t\nthird\r\n", spec_of(DataFormat::kText));
  ASSERT_TRUE(r.is_ok());
  EXPECT_THAT(*r, ElementsAre("2:|first\nsecond", "6:|third"));
}

TEST(DataRecordsTest, StopsAfterMaxRecords) {
  const auto r = records("{\"text\": \"a\"}\n{\"text\": \"b\"}\nnot json\n", spec_of(DataFormat::kJsonl), 2);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->size(), 2u);
}

TEST(DataRecordsTest, JsonArrayInAJsonlFileSaysHowToConvertIt) {
  const std::string array = "[\n{\"text\": \"a\"},\n{\"text\": \"b\"}\n]\n";
  EXPECT_EQ(error_of(array, spec_of(DataFormat::kJsonl)),
            "d:1: this file is a JSON array, not JSON Lines: convert it with `jq -c '.[]' d > dl`, or set "
            "data.format: json");
  // A line that is an array in a file that is not one is just that.
  EXPECT_EQ(error_of("[1, 2]\n[3]\n", spec_of(DataFormat::kJsonl)), "d:1: expected a JSON object, got array");
}

TEST(DataRecordsTest, ErrorsInsideAJsonArrayNameTheLineAndColumn) {
  const std::string missing = "[\n {\"prompt\": \"a\", \"completion\": \"b\"},\n {\"prompt\": \"a\"}\n]";
  EXPECT_EQ(error_of(missing, pairs(DataFormat::kJson)), "d:3: missing field \"completion\" (the record has \"prompt\")");
  EXPECT_THAT(error_of("[\n {\"text\": \"a\"},\n {\"text\":\n  nope}\n]", spec_of(DataFormat::kJson)),
              HasSubstr("d:4:4: not valid JSON"));
  EXPECT_EQ(error_of("[\n {\"text\": \"a\"},\n {\"text\": \"b\"}\n", spec_of(DataFormat::kJson)),
            "d:3: the JSON array is not closed (no ']' after this element)");
  EXPECT_EQ(error_of("[{\"text\": \"a\"}] {}", spec_of(DataFormat::kJson)),
            "d:1: text after the JSON array's closing ']'");
  EXPECT_EQ(error_of("[{\"text\": \"a\"}, 7]", spec_of(DataFormat::kJson)), "d:1: expected a JSON object, got number");
}

TEST(DataRecordsTest, ConversationsAndPreferencePairsWhereTextIsExpectedAreNamed) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";
  EXPECT_THAT(error_of(chat, spec_of(DataFormat::kJsonl)),
              HasSubstr("d:1: missing field \"text\": this record is a conversation (\"messages\", a list of turns)"));
  EXPECT_THAT(error_of(R"({"conversations": []})", pairs(DataFormat::kJsonl)),
              HasSubstr("missing field \"prompt\": this record is a conversation (\"conversations\""));
  EXPECT_THAT(error_of(R"({"prompt": "q", "chosen": "a", "rejected": "b"})", pairs(DataFormat::kJsonl)),
              HasSubstr("missing field \"completion\": this record is a preference pair"));
  EXPECT_EQ(error_of(R"({"instruction": "i", "input": "", "output": "o"})", spec_of(DataFormat::kJsonl)),
            "d:1: missing field \"text\": this record is an Alpaca example (\"instruction\", \"output\"): set "
            "data.chat: alpaca");
  EXPECT_EQ(error_of(R"({"title": "t", "body": "b"})", spec_of(DataFormat::kJsonl)),
            "d:1: missing field \"text\" (the record has \"title\", \"body\")");
  EXPECT_THAT(error_of(R"({"conversations": [{"from": "human", "value": "hi"}]})", spec_of(DataFormat::kJsonl)),
              HasSubstr("set data.chat: sharegpt"));
  EXPECT_EQ(error_of("{}", spec_of(DataFormat::kJsonl)), "d:1: missing field \"text\" (the record is empty)");
}

// ---- conversations (data.chat) -------------------------------------------------

DataSpec chat_of(ChatFormat chat) {
  DataSpec spec = spec_of(DataFormat::kJsonl);
  spec.chat = chat;
  return spec;
}

// Each record's conversation, as the runner receives it.
std::vector<std::string> conversations(std::string_view bytes, const DataSpec& spec) {
  std::vector<std::string> out;
  const Status st = for_each_record(bytes, "d", spec, [&](const DataRecord& r) {
    out.emplace_back(r.conversation);
    return Status::ok();
  });
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return out;
}

TEST(ChatRecordsTest, MessagesPassThroughInTheirKeyOrderWithTheirTools) {
  const std::string line =
      R"({"id": 3, "messages": [{"role": "user", "content": "hi", "name": "x"}, {"role": "assistant", "content": null,)"
      R"( "tool_calls": [{"function": {"name": "f", "arguments": {"z": 1, "a": 2}}}]}, {"role": "tool", "content": "r"},)"
      R"( {"role": "assistant", "content": "done"}], "tools": [{"type": "function"}]})";
  EXPECT_THAT(conversations(line, chat_of(ChatFormat::kMessages)),
              ElementsAre(R"({"messages":[{"role":"user","content":"hi","name":"x"},{"role":"assistant","content":null,)"
                          R"("tool_calls":[{"function":{"name":"f","arguments":{"z":1,"a":2}}}]},)"
                          R"({"role":"tool","content":"r"},{"role":"assistant","content":"done"}],)"
                          R"("tools":[{"type":"function"}]})"));
  // Other field names, from data.fields.
  DataSpec renamed = chat_of(ChatFormat::kMessages);
  renamed.fields = {{"messages", "turns"}, {"role", "speaker"}, {"content", "text"}};
  EXPECT_THAT(conversations(R"({"turns": [{"speaker": "user", "text": "q", "lang": "en"}, {"speaker": "assistant", "text": "a"}]})",
                            renamed),
              ElementsAre(R"({"messages":[{"role":"user","content":"q","lang":"en"},{"role":"assistant","content":"a"}]})"));
}

TEST(ChatRecordsTest, ShareGptAndAlpacaBecomeMessages) {
  const std::string sharegpt =
      R"({"system": "Be kind.", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"},)"
      R"( {"from": "observation", "value": "42"}, {"from": "bot", "value": "it is 42"}]})";
  DataSpec sg = chat_of(ChatFormat::kShareGpt);
  sg.roles = {{"bot", "assistant"}};
  EXPECT_THAT(conversations(sharegpt, sg),
              ElementsAre(R"({"messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"hi"},)"
                          R"({"role":"assistant","content":"hello"},{"role":"tool","content":"42"},)"
                          R"({"role":"assistant","content":"it is 42"}]})"));
  const std::string alpaca =
      R"({"instruction": "Add.", "input": "2 and 3", "output": "5", "history": [["Hi", "Hello"]], "system": "S"})";
  EXPECT_THAT(conversations(alpaca, chat_of(ChatFormat::kAlpaca)),
              ElementsAre(R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"},)"
                          R"({"role":"assistant","content":"Hello"},{"role":"user","content":"Add.\n2 and 3"},)"
                          R"({"role":"assistant","content":"5"}]})"));
  EXPECT_THAT(conversations(R"({"instruction": "Say hi.", "input": "", "output": "hi"})", chat_of(ChatFormat::kAlpaca)),
              ElementsAre(R"({"messages":[{"role":"user","content":"Say hi."},{"role":"assistant","content":"hi"}]})"));
}

TEST(ChatRecordsTest, BadConversationsNameTheLineAndTheTurn) {
  const DataSpec messages = chat_of(ChatFormat::kMessages);
  EXPECT_EQ(error_of("\n" R"({"messages": [{"role": "human", "content": "hi"}]})", messages),
            "d:2: messages[0]: unknown role \"human\" (expected one of system, developer, user, assistant, tool, "
            "ipython; ShareGPT's roles are read with data.chat: sharegpt)");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "hi"}]})", messages),
            "d:1: the conversation has no assistant turn to train");
  DataSpec all = messages;
  all.train_on = TrainOn::kAll;
  EXPECT_EQ(conversations(R"({"messages": [{"role": "user", "content": "hi"}]})", all).size(), 1u);
  EXPECT_EQ(error_of(R"({"messages": []})", all), "d:1: the conversation has no turns");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": 7}]})", messages),
            "d:1: messages[0]: field \"content\" must be a string, null or a list of parts, got number");
  EXPECT_EQ(error_of(R"({"messages": [{"content": "x"}]})", messages), "d:1: messages[0]: missing field \"role\"");
  EXPECT_EQ(error_of(R"({"messages": "hi"})", messages), "d:1: field \"messages\" must be a list of turns, got string");
  EXPECT_EQ(error_of(R"({"chat": []})", messages),
            "d:1: missing field \"messages\" (the record has \"chat\"; data.fields.messages names another)");
  EXPECT_EQ(error_of(R"({"conversations": [{"from": "alien", "value": "x"}]})", chat_of(ChatFormat::kShareGpt)),
            "d:1: conversations[0]: unknown role \"alien\" (known: assistant, function_response, gpt, human, model, "
            "observation, system, tool, user; data.roles maps others)");
  EXPECT_EQ(error_of(R"({"instruction": "i"})", chat_of(ChatFormat::kAlpaca)),
            "d:1: missing field \"output\" (the record has \"instruction\")");
  // Not UTF-8: the JSON reader refuses it, at its line and column.
  EXPECT_THAT(error_of("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}", messages), HasSubstr("d:1:"));
  // Chat data is JSON; a text file is refused by name.
  DataSpec text = messages;
  text.format = DataFormat::kText;
  EXPECT_THAT(error_of("hello", text), HasSubstr("chat data (data.chat: messages) is read from jsonl, json, parquet or arrow files"));
}

TEST(ChatRecordsTest, OnBadRecordSkipLeavesBadRecordsOutAndCountsThem) {
  DataSpec spec = chat_of(ChatFormat::kMessages);
  const std::string good = R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})";
  const std::string text = good + "\n{not json\n" + R"({"messages": [{"role": "user", "content": "q"}]})" + "\n" + good + "\n";
  EXPECT_THAT(error_of(text, spec), HasSubstr("d:2:"));  // error is the default
  spec.on_bad_record = OnBadRecord::kSkip;
  std::vector<std::string> why;
  std::vector<std::int64_t> lines;
  const Status st = for_each_record(
      text, "d", spec,
      [&](const DataRecord& r) {
        lines.push_back(r.line);
        return Status::ok();
      },
      0, [&](const Status& s) { why.push_back(s.message()); });
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_THAT(lines, ElementsAre(1, 4));
  ASSERT_EQ(why.size(), 2u);
  EXPECT_THAT(why[0], HasSubstr("d:2:"));
  EXPECT_EQ(why[1], "d:3: the conversation has no assistant turn to train");
  // What is not a record stays an error.
  spec.format = DataFormat::kJson;
  EXPECT_THAT(error_of("[" + good + ",\n" + good, spec), HasSubstr("the JSON array is not closed"));
}

// ---- preference pairs ----------------------------------------------------------

DataSpec preference_of(DataFormat format) {
  DataSpec spec = spec_of(format);
  spec.preference = true;
  spec.prompt_field = "prompt";
  return spec;
}

TEST(PreferenceRecordsTest, PairsGiveThePromptAndBothCompletions) {
  DataSpec spec = preference_of(DataFormat::kJsonl);
  const std::string text = R"({"prompt": "Q?", "chosen": " yes", "rejected": " no", "id": 3})" "\n"
                           R"({"question": "Q2?", "good": " a", "bad": " b"})" "\n";
  std::vector<std::string> got;
  auto collect = [&](const DataRecord& r) {
    got.push_back(std::to_string(r.line) + ":" + std::string(r.prompt) + "|" + std::string(r.chosen) + "|" +
                  std::string(r.rejected) + "|" + std::string(r.text));
    return Status::ok();
  };
  EXPECT_TRUE(for_each_record(text, "d", spec, collect, 1).is_ok());
  EXPECT_THAT(got, ElementsAre("1:Q?| yes| no|"));
  // Field names from the spec.
  spec.prompt_field = "question";
  spec.chosen_field = "good";
  spec.rejected_field = "bad";
  got.clear();
  ASSERT_TRUE(for_each_record(text.substr(text.find('\n') + 1), "d", spec, collect).is_ok());
  EXPECT_THAT(got, ElementsAre("1:Q2?| a| b|"));
}

TEST(PreferenceRecordsTest, PairsThatTeachNothingAreBadRecords) {
  const DataSpec spec = preference_of(DataFormat::kJsonl);
  EXPECT_EQ(error_of(R"({"prompt": "Q", "chosen": " a", "rejected": " a"})", spec),
            "d:1: the chosen and rejected completions are identical: the pair teaches nothing");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "chosen": "", "rejected": " a"})", spec),
            "d:1: field \"chosen\" is empty: a pair needs two completions");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "chosen": " a"})", spec),
            "d:1: missing field \"rejected\" (the record has \"prompt\", \"chosen\")");
  EXPECT_THAT(error_of(R"({"prompt": "Q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": " b"})", spec),
              HasSubstr("d:1: field \"chosen\" is a conversation: set data.chat: messages"));
  // A text file has no pairs.
  EXPECT_THAT(error_of("Q\n\nA\n", preference_of(DataFormat::kText)),
              HasSubstr("preference pairs are read from jsonl, json, parquet or arrow files, not text"));
  // Under skip they are counted and left out.
  DataSpec skipping = spec;
  skipping.on_bad_record = OnBadRecord::kSkip;
  const std::string text = R"({"prompt": "Q", "chosen": " a", "rejected": " a"})" "\n"
                           R"({"prompt": "Q", "chosen": " a", "rejected": " b"})" "\n";
  std::vector<std::int64_t> lines;
  std::vector<std::string> why;
  ASSERT_TRUE(for_each_record(
                  text, "d", skipping,
                  [&](const DataRecord& r) {
                    lines.push_back(r.line);
                    return Status::ok();
                  },
                  0, [&](const Status& s) { why.push_back(s.message()); })
                  .is_ok());
  EXPECT_THAT(lines, ElementsAre(2));
  ASSERT_EQ(why.size(), 1u);
  EXPECT_THAT(why[0], HasSubstr("d:1: the chosen and rejected completions are identical"));
}

// Conversational pairs (data.chat: messages), read as TRL reads them.
TEST(PreferenceRecordsTest, ConversationalPairsGiveThePromptAndEachWholeConversation) {
  DataSpec spec = preference_of(DataFormat::kJsonl);
  spec.chat = ChatFormat::kMessages;
  std::vector<std::string> got;
  auto collect = [&](const DataRecord& r) {
    got.push_back(std::string(r.prompt) + " | " + std::string(r.chosen) + " | " + std::string(r.rejected));
    return Status::ok();
  };
  const std::string u = R"({"role": "user", "content": "Q"})", a = R"({"role": "assistant", "content": "A"})",
                    b = R"({"role": "assistant", "content": "B"})";
  // An explicit prompt, a string prompt (a user turn), and whole
  // conversations whose shared turns are the prompt.
  const std::string text = "{\"prompt\": [" + u + "], \"chosen\": [" + a + "], \"rejected\": [" + b + "]}\n" +
                           "{\"prompt\": \"Q\", \"chosen\": [" + a + "], \"rejected\": [" + b + "]}\n" +
                           "{\"chosen\": [" + u + ", " + a + "], \"rejected\": [" + u + ", " + b + "]}\n";
  ASSERT_TRUE(for_each_record(text, "d", spec, collect).is_ok());
  const std::string want = R"({"messages":[{"role":"user","content":"Q"}]} | )"
                           R"({"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}]} | )"
                           R"({"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"B"}]})";
  EXPECT_THAT(got, ElementsAre(want, want, want));
  // Each side is checked as a conversation, and a pair that teaches nothing is refused.
  EXPECT_EQ(error_of("{\"prompt\": [" + u + "], \"chosen\": [" + a + "], \"rejected\": [" + a + "]}", spec),
            "d:1: the chosen and rejected completions are identical: the pair teaches nothing");
  EXPECT_THAT(error_of("{\"prompt\": [" + u + "], \"chosen\": [{\"role\": \"bot\", \"content\": \"A\"}], \"rejected\": [" +
                           b + "]}",
                       spec),
              HasSubstr("d:1: chosen: messages[1]: unknown role \"bot\""));
  EXPECT_EQ(error_of("{\"prompt\": [" + u + "], \"chosen\": \"A\", \"rejected\": [" + b + "]}", spec),
            "d:1: field \"chosen\" must be a list of turns (data.chat: messages), got string");
}

// data.margin_field (reward): each pair's margin, a finite number, in
// string and conversational pairs alike; a pair without one is a bad record.
TEST(PreferenceRecordsTest, MarginsAreReadFromTheMarginField) {
  DataSpec spec = preference_of(DataFormat::kJsonl);
  spec.margin_field = "margin";
  const std::string text = R"({"prompt": "Q", "chosen": " a", "rejected": " b", "margin": 1.5})"
                           "\n"
                           R"({"prompt": "Q", "chosen": " a", "rejected": " b", "margin": -2})"
                           "\n";
  std::vector<double> margins;
  auto collect = [&](const DataRecord& r) {
    margins.push_back(r.margin);
    return Status::ok();
  };
  ASSERT_TRUE(for_each_record(text, "d", spec, collect).is_ok());
  EXPECT_THAT(margins, ElementsAre(1.5, -2.0));
  EXPECT_EQ(error_of(R"({"prompt": "Q", "chosen": " a", "rejected": " b"})", spec),
            "d:1: missing field \"margin\" (data.margin_field: every pair needs its margin)");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "chosen": " a", "rejected": " b", "margin": "1"})", spec),
            "d:1: field \"margin\" must be a number, got string");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "chosen": " a", "rejected": " b", "margin": null})", spec),
            "d:1: field \"margin\" must be a number, got null");
  // Without the key a margin field in the data is not read.
  spec.margin_field.clear();
  margins.clear();
  ASSERT_TRUE(for_each_record(text, "d", spec, collect).is_ok());
  EXPECT_THAT(margins, ElementsAre(0.0, 0.0));
  // Conversational pairs carry theirs too.
  spec.margin_field = "m";
  spec.chat = ChatFormat::kMessages;
  margins.clear();
  ASSERT_TRUE(for_each_record(R"({"prompt": "Q", "chosen": [{"role": "assistant", "content": "A"}], )"
                              R"("rejected": [{"role": "assistant", "content": "B"}], "m": 0.25})",
                              "d", spec, collect)
                  .is_ok());
  EXPECT_THAT(margins, ElementsAre(0.25));
}

// kto's labelled completions (data.label_field): a prompt, a completion
// (in `chosen`) and a label, true or false or 1 or 0; anything else, or a
// completion that is empty or a conversation without data.chat, is a bad
// record naming the field.
TEST(PreferenceRecordsTest, LabelledCompletionsAreReadWithTheirLabels) {
  DataSpec spec = preference_of(DataFormat::kJsonl);
  spec.label_field = "label";
  spec.completion_field = "completion";
  const std::string text = R"({"prompt": "Q1", "completion": " a", "label": true})"
                           "\n"
                           R"({"prompt": "Q2", "completion": " b", "label": false})"
                           "\n"
                           R"({"prompt": "Q3", "completion": " c", "label": 1})"
                           "\n"
                           R"({"prompt": "Q4", "completion": " d", "label": 0})"
                           "\n";
  std::vector<std::string> read;
  auto collect = [&](const DataRecord& r) {
    EXPECT_TRUE(r.rejected.empty());
    read.push_back(std::string(r.prompt) + "|" + std::string(r.chosen) + "|" + (r.desirable ? "+" : "-"));
    return Status::ok();
  };
  ASSERT_TRUE(for_each_record(text, "d", spec, collect).is_ok());
  EXPECT_THAT(read, ElementsAre("Q1| a|+", "Q2| b|-", "Q3| c|+", "Q4| d|-"));
  EXPECT_EQ(error_of(R"({"prompt": "Q", "completion": " a"})", spec),
            "d:1: missing field \"label\" (data.label_field: every completion needs its label, true or false)");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "completion": " a", "label": "yes"})", spec),
            "d:1: field \"label\" must be true or false (or 1 or 0), got string");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "completion": " a", "label": 2})", spec),
            "d:1: field \"label\" must be true or false (or 1 or 0), got 2");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "completion": "", "label": true})", spec),
            "d:1: field \"completion\" is empty: a labelled completion needs text");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "label": true})", spec),
            "d:1: missing field \"completion\" (the record has \"prompt\", \"label\")");
  EXPECT_EQ(error_of(R"({"prompt": "Q", "completion": [{"role": "assistant", "content": "A"}], "label": true})", spec),
            "d:1: field \"completion\" is a conversation: set data.chat: messages to read labelled completions as "
            "conversations, rendered with the chat template");
  // Conversations: the prompt's turns (or a string, a user turn) and the
  // completion's after them, as one whole conversation and its prompt.
  spec.chat = ChatFormat::kMessages;
  std::vector<std::pair<std::string, std::string>> turns;
  ASSERT_TRUE(for_each_record(R"({"prompt": "Hi", "completion": [{"role": "assistant", "content": "Hello"}], )"
                              R"("label": false})",
                              "d", spec,
                              [&](const DataRecord& r) {
                                EXPECT_FALSE(r.desirable);
                                turns.emplace_back(std::string(r.prompt), std::string(r.chosen));
                                return Status::ok();
                              })
                  .is_ok());
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].first, R"({"messages":[{"role":"user","content":"Hi"}]})");
  EXPECT_EQ(turns[0].second, R"({"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]})");
  EXPECT_EQ(error_of(R"({"prompt": "Hi", "completion": "Hello", "label": true})", spec),
            "d:1: field \"completion\" must be a list of turns (data.chat: messages), got string");
  EXPECT_EQ(error_of(R"({"prompt": "Hi", "completion": [], "label": true})", spec),
            "d:1: field \"completion\" has no turn: a labelled completion needs one");
}

TEST(PreferenceRecordsTest, APairedJobNamesUnpairedExamplesAsSuch) {
  EXPECT_EQ(error_of(R"({"prompt": "Q", "completion": " a", "label": true})", preference_of(DataFormat::kJsonl)),
            "d:1: missing field \"chosen\": this record is an unpaired KTO example (\"completion\", \"label\"): "
            "set training.method: kto and data.label_field: label to train on it");
}

TEST(PreferenceRecordsTest, ASupervisedJobNamesPreferencePairsAsSuch) {
  EXPECT_EQ(error_of(R"({"prompt": "Q", "chosen": " a", "rejected": " b"})", spec_of(DataFormat::kJsonl)),
            "d:1: missing field \"text\": this record is a preference pair (\"chosen\", \"rejected\"): set "
            "training.method: dpo to train on it");
}

// ---- check_data_file ---------------------------------------------------------

TEST(DataFileCheckTest, CountsWhatItReadsAndDescribesIt) {
  TempDir dir;
  const auto jsonl = dir.write("a.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"\"}\n{\"text\": \"c\"}\n");
  auto facts = check_data_file(jsonl, spec_of(DataFormat::kJsonl));
  ASSERT_TRUE(facts.is_ok()) << facts.status().to_string();
  EXPECT_EQ(facts->records, 3);
  EXPECT_TRUE(facts->all_checked);
  EXPECT_EQ(describe(*facts), "3 records, 42 B");

  const auto array = dir.write("a.json", "[{\"text\": \"a\"}]");
  facts = check_data_file(array, spec_of(DataFormat::kJson));
  ASSERT_TRUE(facts.is_ok()) << facts.status().to_string();
  EXPECT_EQ(describe(*facts), "JSON array of 1 record, 15 B");

  const auto tokens = dir.write("a.bin", std::string(4000, '\0'));
  facts = check_data_file(tokens, spec_of(DataFormat::kTokens));
  ASSERT_TRUE(facts.is_ok()) << facts.status().to_string();
  EXPECT_EQ(describe(*facts), "1,000 tokens, 3.91 KiB");
}

TEST(DataFileCheckTest, FilesTheRunnerWouldRefuseAreErrorsNamingThem) {
  TempDir dir;
  auto error = [](const std::string& path, DataFormat f) {
    const auto facts = check_data_file(path, spec_of(f));
    EXPECT_FALSE(facts.is_ok()) << path;
    return facts.is_ok() ? std::string() : facts.status().message();
  };
  EXPECT_EQ(error(dir.write("empty.jsonl", ""), DataFormat::kJsonl), dir.file("empty.jsonl") + ": is empty");
  EXPECT_EQ(error(dir.write("blank.txt", "\n \n"), DataFormat::kText),
            dir.file("blank.txt") + ": no documents (only blank lines)");
  EXPECT_EQ(error(dir.write("hollow.jsonl", "{\"text\": \"\"}\n{\"text\": \"\"}\n"), DataFormat::kJsonl),
            dir.file("hollow.jsonl") + ": no documents (all 2 records are empty)");
  EXPECT_EQ(error(dir.path().string(), DataFormat::kJsonl), dir.path().string() + ": is a directory, not a data file");
  EXPECT_EQ(error(dir.file("nope.jsonl"), DataFormat::kJsonl), dir.file("nope.jsonl") + ": does not exist");
  // A FIFO is refused without being opened: opening it would wait for a writer.
  const std::string fifo = dir.file("pipe.jsonl");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error(fifo, DataFormat::kJsonl), fifo + ": is a FIFO (named pipe), not a data file");
  EXPECT_THAT(error(dir.write("torn.bin", "12345"), DataFormat::kTokens), HasSubstr("is not a multiple of 4"));
  EXPECT_THAT(error(dir.write("neg.bin", std::string("\x01\0\0\0\xff\xff\xff\xff", 8)), DataFormat::kTokens),
              HasSubstr("neg.bin: token 1 (byte 4): negative id"));
  EXPECT_THAT(error(dir.write("bad.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n"), DataFormat::kJsonl),
              HasSubstr("bad.jsonl:2: missing field \"text\" (the record has \"txt\")"));
}

// Past kCheckWholeBytes the head is read record by record and the rest only
// counted: a bad record early is found, one late is the runner's to find.
TEST(DataFileCheckTest, LargeFilesAreCheckedByTheirHeadAndCountedWhole) {
  TempDir dir;
  const std::string record = "{\"text\": \"" + std::string(100, 'x') + "\"}\n";  // 113 bytes
  const std::int64_t n = static_cast<std::int64_t>(kCheckWholeBytes / record.size()) + 1000;
  std::string body;
  body.reserve(static_cast<std::size_t>(n) * record.size() + 16);
  for (std::int64_t i = 0; i < n; ++i) body += record;
  const auto big = dir.write("big.jsonl", body + "not json\n");
  auto facts = check_data_file(big, spec_of(DataFormat::kJsonl));
  ASSERT_TRUE(facts.is_ok()) << facts.status().to_string();
  EXPECT_EQ(facts->records, n + 1);
  EXPECT_EQ(facts->checked, kCheckedRecords);
  EXPECT_FALSE(facts->all_checked);

  const auto early = dir.write("early.jsonl", record + "{\"text\": 5}\n" + body);
  facts = check_data_file(early, spec_of(DataFormat::kJsonl));
  ASSERT_FALSE(facts.is_ok());
  EXPECT_THAT(facts.status().message(), HasSubstr("early.jsonl:2: field \"text\" must be a string, got number"));

  // Text: paragraphs counted across the chunks the count reads, blank and
  // whitespace-only lines between them.
  const std::string paragraph = std::string(60, 'w') + "\n" + std::string(60, 'v') + "\n \t\n\n";
  const std::int64_t paragraphs = static_cast<std::int64_t>(kCheckWholeBytes / paragraph.size()) + 777;
  std::string text;
  text.reserve(static_cast<std::size_t>(paragraphs) * paragraph.size());
  for (std::int64_t i = 0; i < paragraphs; ++i) text += paragraph;
  facts = check_data_file(dir.write("big.txt", text + "last"), spec_of(DataFormat::kText));
  ASSERT_TRUE(facts.is_ok()) << facts.status().to_string();
  EXPECT_EQ(facts->records, paragraphs + 1);

  std::string array = "[";
  for (std::int64_t i = 0; i < n; ++i) array += (i ? "," : "") + record;
  const auto big_array = dir.write("big.json", array + "]");
  facts = check_data_file(big_array, spec_of(DataFormat::kJson));
  ASSERT_TRUE(facts.is_ok()) << facts.status().to_string();
  EXPECT_TRUE(facts->json_array);
  EXPECT_EQ(facts->checked, kCheckedRecords);
  EXPECT_EQ(facts->records, -1);
}

TEST(DataFileCheckTest, SkippedRecordsAreCountedAndDescribed) {
  TempDir dir;
  const std::string path = dir.write("d.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n{\"text\": \"c\"}\n");
  DataSpec spec = spec_of(DataFormat::kJsonl);
  EXPECT_FALSE(check_data_file(path, spec).is_ok());
  spec.on_bad_record = OnBadRecord::kSkip;
  const auto facts = check_data_file(path, spec);
  ASSERT_TRUE(facts.is_ok()) << facts.status().to_string();
  EXPECT_EQ(facts->records, 2);
  EXPECT_EQ(facts->skipped, 1);
  EXPECT_THAT(describe(*facts), ::testing::StartsWith("2 records, "));
  EXPECT_THAT(describe(*facts), HasSubstr("; 1 bad record skipped (data.on_bad_record: skip; first: " + path +
                                          ":2: missing field \"text\""));
}

}  // namespace
}  // namespace tailor::dsl
