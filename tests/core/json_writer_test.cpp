#include "core/json_writer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/text.h"

namespace tailor {
namespace {

bool is_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Strings built from a mix of plain text, every escape JSON has, multi-byte
// UTF-8 and stray bytes, checked against a real JSON parser: the escaped
// form always parses, and text that was UTF-8 comes back unchanged.
TEST(JsonWriterTest, EscapedStringsParseBackToTheirText) {
  const std::string pieces[] = {"plain text ", "\"",          "\\",           "\n",
                                "\r",          "\t",          "\x01",         "\x1f",
                                "\x7f",        "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                "\x85",        "\xC3",        "\xED\xA0\x80", "/"};
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> pick(0, std::size(pieces) - 1);
  for (int n = 0; n < 2000; ++n) {
    std::string s;
    const int parts = n % 12;
    for (int p = 0; p < parts; ++p)
      s += pieces[pick(rng)];
    std::string out = "prefix:";
    append_json_escaped(out, s);
    ASSERT_EQ(out.rfind("prefix:", 0), 0u);
    const std::string literal = out.substr(7);
    EXPECT_EQ(literal, json_escape(s));
    const auto parsed = nlohmann::json::parse(literal, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << literal;
    if (is_utf8(s)) {
      EXPECT_EQ(parsed.get<std::string>(), s) << literal;
    }
  }
}

TEST(JsonWriterTest, EveryByteAloneGivesValidJson) {
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    const auto parsed = nlohmann::json::parse(json_escape(s), nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << b;
    EXPECT_EQ(parsed.get<std::string>(), b < 0x80 ? s : "\xEF\xBF\xBD") << b;
  }
}

TEST(JsonWriterTest, ADocumentRoundTripsIntegersAtTheirLimitsAndEscapedKeys) {
  JsonWriter w(0);
  w.reserve(256);
  w.begin_object();
  w.field("min", std::numeric_limits<std::int64_t>::min()).field("max", std::numeric_limits<std::int64_t>::max());
  w.field("zero", 0).field("neg", -42).field("a \"key\"\n", "v");
  w.key("list").begin_array().value(1).null().value(true).raw("{\"x\":[]}").end_array();
  w.end_object();
  const std::string text = w.take();
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["min"].get<std::int64_t>(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(j["max"].get<std::int64_t>(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(j["zero"], 0);
  EXPECT_EQ(j["neg"], -42);
  EXPECT_EQ(j["a \"key\"\n"], "v");
  EXPECT_EQ(j["list"].dump(), "[1,null,true,{\"x\":[]}]");
}

}  // namespace
}  // namespace tailor
