#include "dsl/yaml_tree.h"

#include <gtest/gtest.h>

namespace tailor::dsl {
namespace {

std::optional<Node> parse(std::string_view text, Diagnostics& d, YamlLimits limits = {}) {
  return parse_yaml(text, "t.yaml", d, limits);
}

TEST(YamlTreeTest, KeepsOneBasedPositionsOfKeysAndValues) {
  Diagnostics d;
  auto root = parse("a: 1\nb:\n  c: hello\n", d);
  ASSERT_TRUE(root) << d.to_string();
  const MapEntry* b = root->find_entry("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->key_location.line, 2);
  EXPECT_EQ(b->key_location.column, 1);
  const Node* c = b->value.find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->scalar, "hello");
  EXPECT_EQ(c->location.line, 3);
  EXPECT_EQ(c->location.column, 6);
}

TEST(YamlTreeTest, DistinguishesQuotedFromPlainScalars) {
  Diagnostics d;
  auto root = parse("a: true\nb: \"true\"\n", d);
  ASSERT_TRUE(root);
  EXPECT_TRUE(root->find("a")->plain);
  EXPECT_FALSE(root->find("b")->plain);
}

TEST(YamlTreeTest, DuplicateKeyIsAnErrorNamingTheFirstDefinition) {
  Diagnostics d;
  auto root = parse("training:\n  lr: 1\n  lr: 2\n", d);
  EXPECT_FALSE(root);
  ASSERT_EQ(d.error_count(), 1u);
  EXPECT_EQ(d.items()[0].to_string(),
            "t.yaml:3:3: error: training.lr: duplicate key; first defined at line 2, column 3");
}

// A map of n keys: "k00000: v" ... as lines under `labels:`.
std::string map_of(int n, const std::string& last = "") {
  std::string text = "labels:\n";
  char line[32];
  for (int i = 0; i < n; ++i) {
    std::snprintf(line, sizeof line, "  k%05d: v\n", i);
    text += line;
  }
  return text + last;
}

TEST(YamlTreeTest, BoundsTheKeysOfOneMap) {
  // Issue 37's 530 KB spec: a 45,000-key map, under the file size limit,
  // took 7 s to check for duplicates (each key against all before it);
  // it is refused at the first key past the bound, with its position.
  Diagnostics d;
  const std::string text = map_of(45'000);
  ASSERT_LT(text.size(), YamlLimits{}.max_bytes);
  EXPECT_FALSE(parse(text, d));
  ASSERT_EQ(d.error_count(), 1u);
  EXPECT_EQ(d.items()[0].to_string(), "t.yaml:10002:3: error: labels: more than 10000 keys in one map");
  Diagnostics ok;
  auto root = parse(map_of(10'000), ok);
  ASSERT_TRUE(root) << ok.to_string();
  EXPECT_EQ(root->find("labels")->entries.size(), 10'000u);
}

TEST(YamlTreeTest, ADuplicateKeyIsFoundAnywhereInALargeMap) {
  Diagnostics d;
  EXPECT_FALSE(parse(map_of(9'999, "  k00007: w\n"), d));
  ASSERT_EQ(d.error_count(), 1u);
  EXPECT_EQ(d.items()[0].to_string(),
            "t.yaml:10001:3: error: labels.k00007: duplicate key; first defined at line 9, column 3");
}

TEST(YamlTreeTest, MalformedYamlReportsPosition) {
  Diagnostics d;
  EXPECT_FALSE(parse("a: [1, 2\nb: 3\n", d));
  ASSERT_EQ(d.error_count(), 1u);
  EXPECT_EQ(d.items()[0].location.file, "t.yaml");
  EXPECT_GT(d.items()[0].location.line, 0);
  EXPECT_NE(d.items()[0].message.find("malformed YAML"), std::string::npos);
}

TEST(YamlTreeTest, RejectsInvalidUtf8WithPosition) {
  Diagnostics d;
  EXPECT_FALSE(parse("a: ok\nb: caf\xc3\x28\n", d));
  ASSERT_EQ(d.error_count(), 1u);
  EXPECT_EQ(d.items()[0].location.line, 2);
  EXPECT_EQ(d.items()[0].location.column, 7);
  EXPECT_NE(d.items()[0].message.find("UTF-8"), std::string::npos);
}

TEST(YamlTreeTest, AcceptsUtf8AndByteOrderMark) {
  Diagnostics d;
  auto root = parse("\xEF\xBB\xBFname: caf\xC3\xA9 \xE2\x9C\x93\n", d);
  ASSERT_TRUE(root) << d.to_string();
  EXPECT_EQ(root->find("name")->scalar, "caf\xC3\xA9 \xE2\x9C\x93");
}

TEST(YamlTreeTest, RejectsNulByte) {
  Diagnostics d;
  EXPECT_FALSE(parse(std::string_view("a: b\0c\n", 7), d));
  EXPECT_NE(d.items().at(0).message.find("NUL"), std::string::npos);
}

TEST(YamlTreeTest, RejectsEscapesThatDecodeToBytesThatAreNotText) {
  // The file is valid UTF-8; yaml-cpp decodes "\N" (next line, U+0085) to
  // the lone byte 0x85 and "\0" to NUL, which JSON, SQLite and logs
  // downstream cannot carry.
  for (const char* text : {"a: ok\nb: \"caf\\N\"\n", "a: ok\nb: \"a\\0b\"\n", "a: ok\n\"k\\N\": 1\n"}) {
    Diagnostics d;
    EXPECT_FALSE(parse(text, d)) << text;
    ASSERT_EQ(d.error_count(), 1u) << text;
    EXPECT_EQ(d.items()[0].location.line, 2) << text;
  }
  Diagnostics d;
  auto root = parse("b: \"caf\\u00e9 \\x41\"\n", d);
  ASSERT_TRUE(root) << d.to_string();
  EXPECT_EQ(root->find("b")->scalar, "caf\xC3\xA9 A");
}

TEST(YamlTreeTest, RejectsFilesOverTheSizeLimit) {
  Diagnostics d;
  YamlLimits limits;
  limits.max_bytes = 64;
  EXPECT_FALSE(parse(std::string(65, '#'), d, limits));
  EXPECT_NE(d.items().at(0).message.find("file is 65 B; job spec files are limited to 64 B"), std::string::npos);
}

TEST(YamlTreeTest, BoundsNestingDepth) {
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  Diagnostics d;
  EXPECT_FALSE(parse(deep, d));
  EXPECT_NE(d.items().at(0).message.find("nesting deeper than 64"), std::string::npos);
}

// Far deeper than the limit, the document is refused before yaml-cpp
// tokenizes it (its scanner holds a flow collection's tokens until they
// close): at the first bracket past 4 x 64, the same words. Brackets in
// quotes and comments do not count.
TEST(YamlTreeTest, RefusesAHundredThousandBracketsBeforeScanningThem) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Diagnostics d;
  EXPECT_FALSE(parse(deep, d));
  ASSERT_EQ(d.items().size(), 1u);
  EXPECT_EQ(d.items().at(0).message, "nesting deeper than 64 levels");
  EXPECT_EQ(d.items().at(0).location.line, 1);
  EXPECT_EQ(d.items().at(0).location.column, 257);
  const std::string quoted = "a: \"" + std::string(300, '[') + "\"\nb: '" + std::string(300, '{') + "'\n# " +
                             std::string(300, '[') + "\nc: 1\n";
  Diagnostics ok;
  const auto n = parse(quoted, ok);
  ASSERT_TRUE(n) << ok.to_string();
  EXPECT_EQ(n->find("a")->scalar, std::string(300, '['));
}

TEST(YamlTreeTest, StopsAliasBombBeforeExpandingIt) {
  // Each level doubles: 2^30 nodes if expanded naively.
  std::string bomb = "a0: &a0 [x, x]\n";
  for (int i = 1; i < 30; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" + std::to_string(i - 1) + ", *a" +
            std::to_string(i - 1) + "]\n";
  }
  Diagnostics d;
  EXPECT_FALSE(parse(bomb, d));
  ASSERT_EQ(d.error_count(), 1u);
  EXPECT_NE(d.items()[0].message.find("alias bomb"), std::string::npos);
}

TEST(YamlTreeTest, ExpandsSmallAliasesAndMergeKeys) {
  Diagnostics d;
  auto root = parse("base: &b {lr: 1, seed: 3}\nrun:\n  <<: *b\n  lr: 2\n", d);
  ASSERT_TRUE(root) << d.to_string();
  const Node* run = root->find("run");
  EXPECT_EQ(run->find("lr")->scalar, "2");    // own key wins
  EXPECT_EQ(run->find("seed")->scalar, "3");  // merged from the anchor
}

TEST(YamlTreeTest, RejectsSecondDocument) {
  Diagnostics d;
  EXPECT_FALSE(parse("a: 1\n---\nb: 2\n", d));
  EXPECT_NE(d.items().at(0).message.find("second one"), std::string::npos);
}

TEST(YamlTreeTest, EmptyDocumentIsNull) {
  Diagnostics d;
  auto root = parse("# only a comment\n", d);
  ASSERT_TRUE(root);
  EXPECT_TRUE(root->is_null());
}

TEST(YamlTreeTest, EmitRoundTripsValuesThatNeedQuotes) {
  Diagnostics d;
  const std::string text = "a: \"true\"\nb: \"x: y\"\nc: [1, 2]\nd:\n  - k: v\n    n: 2\ne: plain\nf: ''\n";
  auto root = parse(text, d);
  ASSERT_TRUE(root);
  const std::string emitted = emit_yaml(*root);
  Diagnostics d2;
  auto again = parse(emitted, d2);
  ASSERT_TRUE(again) << emitted << d2.to_string();
  EXPECT_FALSE(again->find("a")->plain);
  EXPECT_EQ(again->find("b")->scalar, "x: y");
  EXPECT_EQ(again->find("c")->items.size(), 2u);
  EXPECT_EQ(again->find("d")->items.at(0).find("n")->scalar, "2");
  EXPECT_EQ(again->find("e")->scalar, "plain");
  EXPECT_EQ(again->find("f")->scalar, "");
}

TEST(YamlTreeTest, EmitJsonTypesPlainScalars) {
  Diagnostics d;
  auto root = parse("a: 3\nb: 1.5\nc: true\nd: \"4\"\ne: text\n", d);
  ASSERT_TRUE(root);
  EXPECT_EQ(emit_json(*root, -1), R"({"a":3,"b":1.5,"c":true,"d":"4","e":"text"})");
}

}  // namespace
}  // namespace tailor::dsl
