// safetensors reading and writing: round trips, files built byte by byte
// from the format's description, and one corrupt file per validation rule.
#include "runner/io/safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runner/data/file_io.h"
#include "runner/io/hf_folder.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::runner::io {
namespace {

using tailor::testing::read_text;

namespace fs = std::filesystem;
using tailor::testing::TempDir;

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// A file as the format describes it: u64 little-endian header length, the
// header, the buffer. No padding unless the caller adds it.
std::string file_bytes(const std::string& header, const std::string& buffer) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + buffer;
}

template <class T>
std::vector<T> values(const TensorView& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

TEST(SafetensorsTest, DTypeNamesAndSizesFollowTheFormat) {
  EXPECT_STREQ(to_string(DType::kBF16), "BF16");
  EXPECT_STREQ(to_string(DType::kBool), "BOOL");
  EXPECT_STREQ(to_string(DType::kU8), "U8");
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
}

TEST(SafetensorsTest, RoundTripKeepsNamesOrderDtypesShapesBytesAndMetadata) {
  TempDir dir;
  const std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-3f};
  const std::vector<std::uint16_t> b{0x3f80, 0xc000, 0x7f80};  // bf16 1, -2, inf
  const std::vector<std::int64_t> c{-5, 1LL << 40};
  const std::vector<std::uint8_t> d{1, 0, 1};
  const std::vector<float> empty;
  const std::vector<double> scalar{2.718281828459045};
  const std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(write_safetensors(path,
                                {{"z.weight", DType::kF32, {2, 3}, bytes_of(a)},
                                 {"a.bf16", DType::kBF16, {3}, bytes_of(b)},
                                 {"ints", DType::kI64, {2, 1}, bytes_of(c)},
                                 {"mask", DType::kBool, {3}, bytes_of(d)},
                                 {"nothing", DType::kF32, {0, 4}, bytes_of(empty)},
                                 {"scalar", DType::kF64, {}, bytes_of(scalar)}},
                                {{"format", "pt"}, {"note", "ünïcode"}})
                  .is_ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 6u);
  std::vector<std::string> names;
  for (const auto& t : f->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"z.weight", "a.bf16", "ints", "mask", "nothing", "scalar"}));
  const TensorView* z = f->find("z.weight");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->dtype, DType::kF32);
  EXPECT_EQ(z->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(values<float>(*z), a);
  EXPECT_EQ(values<std::uint16_t>(*f->find("a.bf16")), b);
  EXPECT_EQ(values<std::int64_t>(*f->find("ints")), c);
  EXPECT_EQ(f->find("mask")->dtype, DType::kBool);
  EXPECT_EQ(values<std::uint8_t>(*f->find("mask")), d);
  EXPECT_EQ(f->find("nothing")->data.size(), 0u);
  EXPECT_TRUE(f->find("scalar")->shape.empty());
  EXPECT_EQ(values<double>(*f->find("scalar")), scalar);
  EXPECT_EQ(f->find("absent"), nullptr);
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "ünïcode"}}));
  EXPECT_EQ(f->path(), path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(SafetensorsTest, WrittenLayoutIsThePublishedOne) {
  TempDir dir;
  const std::vector<float> a{1.0f, 2.0f};
  const std::vector<std::int32_t> b{7, 8, 9};
  const std::string path = dir.file("x.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"a", DType::kF32, {2}, bytes_of(a)}, {"b", DType::kI32, {3}, bytes_of(b)}},
                                {{"format", "pt"}})
                  .is_ok());
  const std::string raw = read_text(path);
  ASSERT_GE(raw.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[static_cast<std::size_t>(i)]);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  ASSERT_EQ(raw.size(), 8 + n + 8 + 12);
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.find_first_not_of(' ', header.rfind('}') + 1), std::string::npos) << "padding is spaces";
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(j["b"]["dtype"], "I32");
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json::array({8, 20}));
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  // The buffer is the tensors' little-endian bytes back to back.
  std::string expected_buffer(20, '\0');
  std::memcpy(expected_buffer.data(), a.data(), 8);
  std::memcpy(expected_buffer.data() + 8, b.data(), 12);
  EXPECT_EQ(raw.substr(8 + n), expected_buffer);
}

TEST(SafetensorsTest, ReadsAFileBuiltByHandFromTheSpecification) {
  TempDir dir;
  // 1.0f = 00 00 80 3f, -2.5f = 00 00 20 c0; i16 258 = 02 01. The header is
  // unpadded (odd length), lists the second tensor first and has extra
  // whitespace: all allowed by the format.
  std::string buffer("\x00\x00\x80\x3f\x00\x00\x20\xc0\x02\x01", 10);
  const std::string header =
      R"({ "s": {"dtype": "I16", "shape": [1], "data_offsets": [8, 10]},)"
      R"( "__metadata__": {"format": "pt"},)"
      R"( "w": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]} })";
  const std::string path = dir.write("hand.safetensors", file_bytes(header, buffer));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "w");  // file order = buffer order
  EXPECT_EQ(f->tensors()[1].name, "s");
  EXPECT_EQ(values<float>(*f->find("w")), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(values<std::int16_t>(*f->find("s")), (std::vector<std::int16_t>{258}));
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

// A model's weights, under tailord, only from inside the spec root: a
// safetensors file (or a shard index) linked out of it is refused, checked
// on the file opened. Files of the runner's own (checkpoints) are opened
// without the check.
TEST(SafetensorsTest, AWeightFileLinkedOutOfTheSpecRootIsRefused) {
  TempDir root, elsewhere;
  const std::string outside = elsewhere.file("model.safetensors");
  const std::vector<float> a = {1.0f, 2.0f};
  ASSERT_TRUE(write_safetensors(outside, {{"a", DType::kF32, {2}, bytes_of(a)}}).is_ok());
  std::ofstream(elsewhere.file("model.safetensors.index.json")) << R"({"weight_map": {"a": "model.safetensors"}})";
  fs::create_symlink(outside, root.file("model.safetensors"));
  fs::create_symlink(elsewhere.file("model.safetensors.index.json"), root.file("model.safetensors.index.json"));
  ASSERT_TRUE(write_safetensors(root.file("own.safetensors"), {{"a", DType::kF32, {2}, bytes_of(a)}}).is_ok());
  ASSERT_TRUE(data::set_read_root(root.path().string()).is_ok());
  struct Reset {
    ~Reset() { (void)data::set_read_root(""); }
  } reset;
  auto linked = SafetensorsFile::open(root.file("model.safetensors"), /*inside_read_root=*/true);
  ASSERT_FALSE(linked.is_ok());
  EXPECT_EQ(linked.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(linked.status().message().find("outside the spec root"), std::string::npos) << linked.status().message();
  auto index = read_shard_index(root.file("model.safetensors.index.json"));
  ASSERT_FALSE(index.is_ok());
  EXPECT_NE(index.status().message().find("outside the spec root"), std::string::npos) << index.status().message();
  EXPECT_TRUE(SafetensorsFile::open(root.file("own.safetensors"), /*inside_read_root=*/true).is_ok());
  EXPECT_TRUE(SafetensorsFile::open(root.file("model.safetensors")).is_ok()) << "a checkpoint of the runner's own";
}

TEST(SafetensorsTest, ViewsStayValidWhenTheFileObjectIsMoved) {
  TempDir dir;
  const std::vector<float> a{4.0f, 5.0f};
  const std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"a", DType::kF32, {2}, bytes_of(a)}}).is_ok());
  auto opened = SafetensorsFile::open(path);
  ASSERT_TRUE(opened.is_ok());
  SafetensorsFile moved = std::move(opened).value();
  SafetensorsFile again = std::move(moved);
  EXPECT_EQ(values<float>(*again.find("a")), a);
  EXPECT_TRUE(again.metadata().empty());
}

// ---- every validation rule on open ------------------------------------------

struct Corrupt {
  const char* label;
  std::string bytes;
  std::string expected;  // part of the message
};

std::string entry(const std::string& body) { return R"({"t": )" + body + "}"; }

TEST(SafetensorsTest, EveryCorruptFileIsRefusedWithAMessageNamingFileAndTensor) {
  TempDir dir;
  std::string huge_len(8, '\0');
  huge_len[3] = 0x10;  // 0x10000000 = 268 MB
  std::string past_end(8, '\0');
  past_end[0] = 100;
  const std::string f32x2 = std::string(8, '\0');
  const std::vector<Corrupt> cases = {
      {"empty", "", "too short"},
      {"seven bytes", std::string(7, '\0'), "too short"},
      {"header over 100 MB", huge_len + "{}", "exceeds the 100 MB limit"},
      {"header past the end", past_end + "{}", "past the end"},
      {"not json", file_bytes("{\"t\": ", ""), "not valid JSON"},
      {"not an object", file_bytes("[1, 2]", ""), "not a JSON object"},
      {"entry not an object", file_bytes(entry("3"), ""), "\"t\": entry is not a JSON object"},
      {"missing dtype", file_bytes(entry(R"({"shape": [2], "data_offsets": [0, 8]})"), f32x2), "\"t\": missing"},
      {"unknown dtype", file_bytes(entry(R"({"dtype": "F7", "shape": [2], "data_offsets": [0, 8]})"), f32x2),
       "\"t\": unknown or unsupported dtype \"F7\""},
      {"negative shape", file_bytes(entry(R"({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]})"), f32x2),
       "\"t\": negative dimension"},
      {"overflowing shape",
       file_bytes(entry(R"({"dtype": "I64", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]})"), f32x2),
       "\"t\": shape [4611686018427387904, 4] overflows"},
      {"dimension beyond int64",
       file_bytes(entry(R"({"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 8]})"), f32x2),
       "\"t\": shape dimension 18446744073709551615 overflows"},
      {"offsets beyond the buffer", file_bytes(entry(R"({"dtype": "F32", "shape": [2], "data_offsets": [4, 12]})"), f32x2),
       "\"t\": data_offsets [4, 12] beyond the 8-byte buffer"},
      {"end before begin", file_bytes(entry(R"({"dtype": "F32", "shape": [0], "data_offsets": [8, 4]})"), f32x2),
       "\"t\": data_offsets end 4 < begin 8"},
      {"negative offset", file_bytes(entry(R"({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]})"), f32x2),
       "\"t\": data_offsets must be non-negative"},
      {"size does not match shape", file_bytes(entry(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})"), f32x2),
       "\"t\": 8 bytes for shape [3] of F32, which needs 12"},
      {"overlap",
       file_bytes(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                  R"( "u": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                  f32x2),
       "tensors \"t\" [0, 8) and \"u\" [4, 8) overlap"},
      {"metadata value not a string", file_bytes(R"({"__metadata__": {"format": "pt", "steps": 3}})", ""),
       "__metadata__ value of \"steps\" is not a string"},
      {"metadata not an object", file_bytes(R"({"__metadata__": ["pt"]})", ""), "__metadata__ is not a JSON object"},
  };
  int i = 0;
  for (const Corrupt& c : cases) {
    const std::string path = dir.write("bad" + std::to_string(i++) + ".safetensors", c.bytes);
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok()) << c.label;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << c.label;
    EXPECT_NE(f.status().message().find(path), std::string::npos) << c.label << ": " << f.status().message();
    EXPECT_NE(f.status().message().find(c.expected), std::string::npos) << c.label << ": " << f.status().message();
  }
}

TEST(SafetensorsTest, AFolderIsNotASafetensorsFile) {
  TempDir dir;
  auto f = SafetensorsFile::open(dir.path().string());
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("is not a regular file"), std::string::npos) << f.status().message();
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  TempDir dir;
  auto f = SafetensorsFile::open(dir.file("absent.safetensors"));
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("absent.safetensors"), std::string::npos);
}

// ---- writing ------------------------------------------------------------------

TEST(SafetensorsTest, WriterRefusesInconsistentTensorsAndLeavesTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<float> a{1, 2, 3};
  ASSERT_TRUE(write_safetensors(path, {{"a", DType::kF32, {3}, bytes_of(a)}}).is_ok());
  const std::string before = read_text(path);
  const std::vector<std::pair<std::vector<TensorToWrite>, std::string>> bad = {
      {{{"a", DType::kF32, {4}, bytes_of(a)}}, "\"a\": 12 bytes of data for shape [4] of F32, which needs 16"},
      {{{"a", DType::kF32, {3}, bytes_of(a)}, {"a", DType::kF32, {3}, bytes_of(a)}}, "\"a\": duplicate name"},
      {{{"__metadata__", DType::kF32, {3}, bytes_of(a)}}, "reserved"},
      {{{"", DType::kF32, {3}, bytes_of(a)}}, "empty name"},
      {{{"a", DType::kF32, {-3}, bytes_of(a)}}, "negative or overflowing shape [-3]"},
  };
  for (const auto& [tensors, expected] : bad) {
    const Status s = write_safetensors(path, tensors);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << expected;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  }
  EXPECT_EQ(read_text(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(SafetensorsTest, WriteIntoAMissingFolderIsAnIOErrorNamingThePath) {
  TempDir dir;
  const std::vector<float> a{1};
  const std::string path = dir.file("no/such/folder/m.safetensors");
  const Status s = write_safetensors(path, {{"a", DType::kF32, {1}, bytes_of(a)}});
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("no/such/folder/m.safetensors"), std::string::npos) << s.message();
}

TEST(SafetensorsTest, AnEmptyFileHoldsOnlyItsHeader) {
  TempDir dir;
  const std::string path = dir.file("e.safetensors");
  ASSERT_TRUE(write_safetensors(path, {}).is_ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(read_text(path).size() % 8, 0u);
}

}  // namespace
}  // namespace tailor::runner::io
