// Parquet files, Arrow IPC files and streams and datasets' save_to_disk
// folders, written by pyarrow and datasets (table_data_reference.py in
// .venv), against the same records in JSON Lines: the same documents,
// token for token and mask for mask, for text, prompt/completion,
// conversations and preference pairs; bad tables named by file and row.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dsl/data_records.h"
#include "dsl/table_records.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/dataset.h"
#include "runner/data/file_io.h"
#include "runner/data/token_cache.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::data {
namespace {

namespace fs = std::filesystem;
using tailor::testing::TempDir;
using ::testing::HasSubstr;

// The reference files, written once for the suite.
class TableDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string cmd = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python " + TAILOR_SOURCE_DIR +
                            "/tests/runner/data/table_data_reference.py " + dir_->path().string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string file(const std::string& name) { return dir_->file(name); }

  static dsl::DataSpec spec_for(const std::string& shape, dsl::DataFormat format) {
    dsl::DataSpec spec;
    spec.format = format;
    if (shape == "pc") {
      spec.prompt_field = "prompt";
      spec.completion_field = "completion";
    } else if (shape == "chat") {
      spec.chat = dsl::ChatFormat::kMessages;
      spec.chat_template = std::string(TAILOR_SOURCE_DIR) + "/configs/data/chatml.jinja";
    } else if (shape == "pref") {
      spec.preference = true;
      spec.prompt_field = "prompt";
      spec.seq_len = 64;  // a pair's prompt must leave room for its completions
    }
    return spec;
  }

  static TempDir* dir_;
};
TempDir* TableDataTest::dir_ = nullptr;

TEST_F(TableDataTest, EveryTableFormGivesTheDocumentsOfTheSameRecordsInJsonLines) {
  const ByteTokenizer tok;
  for (const std::string shape : {"text", "pc", "chat", "pref"}) {
    const dsl::DataSpec jsonl = spec_for(shape, dsl::DataFormat::kJsonl);
    std::optional<ChatSetup> chat;
    if (dsl::is_chat(jsonl)) {
      auto setup = load_chat_setup(jsonl, "");
      ASSERT_TRUE(setup.is_ok()) << setup.status().message();
      chat = std::move(*setup);
    }
    const ChatSetup* c = chat ? &*chat : nullptr;
    auto expected = tokenize_file(file(shape + ".jsonl"), jsonl, tok, c);
    ASSERT_TRUE(expected.is_ok()) << expected.status().message();
    ASSERT_GT(expected->documents(), 10u) << shape;
    for (const auto& [suffix, format] :
         {std::pair{".parquet", dsl::DataFormat::kParquet}, std::pair{".arrow", dsl::DataFormat::kArrow},
          std::pair{"_stream.arrow", dsl::DataFormat::kArrow}, std::pair{"_ds", dsl::DataFormat::kArrow}}) {
      const std::string path = file(shape + suffix);
      auto got = tokenize_file(path, spec_for(shape, format), tok, c);
      ASSERT_TRUE(got.is_ok()) << path << ": " << got.status().message();
      EXPECT_TRUE(same_documents(*expected, *got))
          << path << ": " << got->documents() << " documents against " << expected->documents();
    }
  }
}

TEST_F(TableDataTest, RecordsNameTheirRowAndItsRowGroupOrFile) {
  std::vector<std::string> where;
  const dsl::DataSpec spec = spec_for("text", dsl::DataFormat::kParquet);
  ASSERT_TRUE(dsl::for_each_table_record(file("text.parquet"), spec, [&](const dsl::DataRecord& r) {
                where.emplace_back(r.where);
                EXPECT_EQ(r.line, static_cast<std::int64_t>(where.size()));
                return Status::ok();
              }).is_ok());
  ASSERT_EQ(where.size(), 24u);
  EXPECT_EQ(where[5], file("text.parquet") + ": row 5 (row group 1, row 1 in it)");
  where.clear();
  ASSERT_TRUE(dsl::for_each_table_record(file("text_ds"), spec_for("text", dsl::DataFormat::kArrow),
                                         [&](const dsl::DataRecord& r) {
                                           where.emplace_back(r.where);
                                           return Status::ok();
                                         })
                  .is_ok());
  ASSERT_EQ(where.size(), 24u);
  EXPECT_THAT(where[13], HasSubstr("_ds: row 13 (data-00001-of-00002.arrow, record batch 0, row 1 in it)"));
  // Columns for scripts and errors, as Arrow names their types.
  auto columns = dsl::table_columns(file("chat.parquet"), dsl::DataFormat::kParquet);
  ASSERT_TRUE(columns.is_ok());
  ASSERT_EQ(columns->size(), 1u);
  EXPECT_THAT(columns->front(), HasSubstr("messages: list<"));
}

TEST_F(TableDataTest, BadTablesAreErrorsNamingTheFileAndTheRow) {
  const ByteTokenizer tok;
  auto missing = tokenize_file(file("no_text_column.parquet"), spec_for("text", dsl::DataFormat::kParquet), tok);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("no_text_column.parquet: row 0 (row group 0, row 0 in it): missing field \"text\""));
  EXPECT_THAT(missing.status().message(), HasSubstr("\"body\""));

  auto utf8 = tokenize_file(file("not_utf8.parquet"), spec_for("text", dsl::DataFormat::kParquet), tok);
  ASSERT_FALSE(utf8.is_ok());
  EXPECT_THAT(utf8.status().message(), HasSubstr("not_utf8.parquet: row 1 (row group 0, row 1 in it)"));
  EXPECT_THAT(utf8.status().message(), HasSubstr("column \"text\": not valid UTF-8"));

  auto dict = tokenize_file(file("dict_ds"), spec_for("text", dsl::DataFormat::kArrow), tok);
  ASSERT_FALSE(dict.is_ok());
  EXPECT_THAT(dict.status().message(), HasSubstr("a DatasetDict saved with save_to_disk (splits: "));
  EXPECT_THAT(dict.status().message(), HasSubstr(file("dict_ds") + "/train"));

  auto not_parquet = tokenize_file(file("text.jsonl"), spec_for("text", dsl::DataFormat::kParquet), tok);
  ASSERT_FALSE(not_parquet.is_ok());
  EXPECT_THAT(not_parquet.status().message(), HasSubstr("text.jsonl: not a readable parquet file"));

  // A null text in the second row group: an error naming it, or (skip) left
  // out and counted.
  dsl::DataSpec spec = spec_for("text", dsl::DataFormat::kParquet);
  auto null_row = tokenize_file(file("null_row.parquet"), spec, tok);
  ASSERT_FALSE(null_row.is_ok());
  EXPECT_THAT(
      null_row.status().message(),
      HasSubstr("null_row.parquet: row 5 (row group 1, row 1 in it): field \"text\" must be a string, got null"));
  spec.on_bad_record = dsl::OnBadRecord::kSkip;
  SkippedRecords skipped;
  auto kept = tokenize_file(file("null_row.parquet"), spec, tok, nullptr, &skipped);
  ASSERT_TRUE(kept.is_ok()) << kept.status().message();
  EXPECT_EQ(kept->documents(), 6u);
  EXPECT_EQ(skipped.count, 1);
}

TEST_F(TableDataTest, SubmissionChecksCountRowsAndReadTheFirstOnes) {
  auto facts = dsl::check_data_file(file("text_ds"), spec_for("text", dsl::DataFormat::kArrow));
  ASSERT_TRUE(facts.is_ok()) << facts.status().message();
  EXPECT_EQ(facts->records, 24);
  EXPECT_EQ(facts->checked, 24);
  EXPECT_TRUE(facts->all_checked);
  EXPECT_THAT(dsl::describe(*facts), HasSubstr("24 records"));
  for (const std::string name : {"text_stream.arrow", "text.arrow"}) {
    auto f = dsl::check_data_file(file(name), spec_for("text", dsl::DataFormat::kArrow));
    ASSERT_TRUE(f.is_ok()) << name << ": " << f.status().message();
    EXPECT_EQ(f->records, 24) << name;
  }
  auto bad = dsl::check_data_file(file("no_text_column.parquet"), spec_for("text", dsl::DataFormat::kParquet));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("row 0 (row group 0, row 0 in it): missing field \"text\""));
}

TEST_F(TableDataTest, ARunnerReadsTablesOnlyInsideItsReadRoot) {
  TempDir elsewhere;
  ASSERT_TRUE(set_read_root(elsewhere.path().string()).is_ok());
  auto outside = tokenize_file(file("text.parquet"), spec_for("text", dsl::DataFormat::kParquet), ByteTokenizer());
  auto outside_ds = tokenize_file(file("text_ds"), spec_for("text", dsl::DataFormat::kArrow), ByteTokenizer());
  ASSERT_TRUE(set_read_root("").is_ok());
  ASSERT_FALSE(outside.is_ok());
  EXPECT_THAT(outside.status().message(), HasSubstr("outside the spec root"));
  ASSERT_FALSE(outside_ds.is_ok());
  EXPECT_THAT(outside_ds.status().message(), HasSubstr("outside the spec root"));
}

TEST_F(TableDataTest, ASaveToDiskFolderIsCachedAndRetokenizedWhenAShardChanges) {
  TempDir cache;
  const dsl::DataSpec spec = spec_for("text", dsl::DataFormat::kArrow);
  const ByteTokenizer tok;
  auto first = load_tokenized(file("text_ds"), spec, tok, cache.path().string());
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  EXPECT_EQ(first->source, TokenizedData::Source::kTokenized);
  auto again = load_tokenized(file("text_ds"), spec, tok, cache.path().string());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->source, TokenizedData::Source::kCache);
  EXPECT_TRUE(same_documents(first->store, again->store));
  // A shard rewritten in place (here: its mtime moved) is new data.
  const std::string shard = file("text_ds") + "/data-00001-of-00002.arrow";
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  auto changed = load_tokenized(file("text_ds"), spec, tok, cache.path().string());
  ASSERT_TRUE(changed.is_ok());
  EXPECT_EQ(changed->source, TokenizedData::Source::kTokenized);
}

}  // namespace
}  // namespace tailor::runner::data
