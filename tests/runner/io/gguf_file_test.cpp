// runner/io/gguf_file.h: f16 rounding as numpy's, Q8_0 blocks as gguf-py's
// quantizer, and the file's layout (header, aligned offsets, data), read
// back here byte by byte. The gguf package and llama.cpp read whole exports
// in tests/runner/torch/gguf_export_test.cpp.
#include "runner/io/gguf_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tests/testing/temp_dir.h"

namespace tailor::runner::io {
namespace {

TEST(GgufFileTest, F16RoundsToNearestEvenKeepsSubnormalsInfinitiesAndNaN) {
  EXPECT_EQ(f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f16_bits(65504.0f), 0x7BFF);                   // the largest f16
  EXPECT_EQ(f16_bits(65520.0f), 0x7C00);                   // halfway to the next: to infinity (even)
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -24)), 0x0001);      // the smallest subnormal
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -26)), 0x0000);      // under half of it
  EXPECT_EQ(f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // a tie: to the even 1.0
  EXPECT_EQ(f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // a tie: to the even 1 + 2^-9
  EXPECT_EQ(f16_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f16_bits(std::numeric_limits<float>::quiet_NaN()) & 0x7E00, 0x7E00);
  for (float x : {0.1f, -3.14159f, 1e-5f, 60000.0f, 6.1e-5f}) {
    const float back = f16_value(f16_bits(x));
    EXPECT_LE(std::fabs(back - x), std::fabs(x) * std::ldexp(1.0f, -11) + std::ldexp(1.0f, -25)) << x;
    EXPECT_EQ(f16_bits(back), f16_bits(x)) << x;
  }
}

TEST(GgufFileTest, Q8_0BlocksScaleByTheLargestOver127AndRoundHalvesAwayFromZero) {
  std::vector<float> x(64, 0.0f);
  x[0] = 127.0f;  // d = 1: values are their own codes
  x[1] = -63.5f;  // a half: away from zero
  x[2] = 2.5f;
  x[3] = -0.4f;
  // The second block is all zeros: d = 0 and every code 0.
  std::vector<std::byte> out(ggml_bytes(GgmlType::kQ8_0, 64));
  ASSERT_EQ(out.size(), 68u);
  quantize_q8_0(x, out.data());
  std::uint16_t d;
  std::memcpy(&d, out.data(), 2);
  EXPECT_EQ(d, 0x3C00);
  auto code = [&](std::size_t block, std::size_t i) { return static_cast<int>(static_cast<std::int8_t>(out[block * 34 + 2 + i])); };
  EXPECT_EQ(code(0, 0), 127);
  EXPECT_EQ(code(0, 1), -64);
  EXPECT_EQ(code(0, 2), 3);
  EXPECT_EQ(code(0, 3), 0);
  std::memcpy(&d, out.data() + 34, 2);
  EXPECT_EQ(d, 0);
  for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(code(1, i), 0);
}

// Little-endian reads from a file's bytes.
struct Reader {
  std::string b;
  std::size_t at = 0;
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, b.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = get<std::uint64_t>();
    std::string s = b.substr(at, n);
    at += n;
    return s;
  }
};

TEST(GgufFileTest, HeaderMetadataInfosAndAlignedDataAreWhereTheFormatSays) {
  tailor::testing::TempDir dir;
  const std::string path = dir.file("t.gguf");
  const std::vector<std::pair<std::string, GgufValue>> kv = {
      {"general.architecture", std::string("llama")},
      {"llama.block_count", std::uint32_t{2}},
      {"tokenizer.ggml.tokens", std::vector<std::string>{"a", "bc"}},
      {"tokenizer.ggml.scores", std::vector<float>{0.5f, -1.0f}},
      {"tokenizer.ggml.add_bos_token", true},
  };
  const std::vector<GgufTensorInfo> tensors = {{"v", {3}, GgmlType::kF32}, {"m", {2, 32}, GgmlType::kQ8_0}};
  ASSERT_TRUE(write_gguf(path, kv, tensors, [](std::size_t i, std::vector<std::byte>& bytes) {
                if (i == 0) {
                  const float v[3] = {1, 2, 3};
                  bytes.resize(12);
                  std::memcpy(bytes.data(), v, 12);
                } else {
                  bytes.assign(68, std::byte{7});
                }
                return Status::ok();
              }).is_ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  Reader r{s.str()};
  EXPECT_EQ(r.b.substr(0, 4), "GGUF");
  r.at = 4;
  EXPECT_EQ(r.get<std::uint32_t>(), 3u);
  EXPECT_EQ(r.get<std::uint64_t>(), 2u);
  EXPECT_EQ(r.get<std::uint64_t>(), 6u);  // and general.alignment
  EXPECT_EQ(r.str(), "general.architecture");
  EXPECT_EQ(r.get<std::uint32_t>(), 8u);  // string
  EXPECT_EQ(r.str(), "llama");
  EXPECT_EQ(r.str(), "llama.block_count");
  EXPECT_EQ(r.get<std::uint32_t>(), 4u);  // u32
  EXPECT_EQ(r.get<std::uint32_t>(), 2u);
  EXPECT_EQ(r.str(), "tokenizer.ggml.tokens");
  EXPECT_EQ(r.get<std::uint32_t>(), 9u);  // array
  EXPECT_EQ(r.get<std::uint32_t>(), 8u);  // of strings
  EXPECT_EQ(r.get<std::uint64_t>(), 2u);
  EXPECT_EQ(r.str(), "a");
  EXPECT_EQ(r.str(), "bc");
  EXPECT_EQ(r.str(), "tokenizer.ggml.scores");
  EXPECT_EQ(r.get<std::uint32_t>(), 9u);
  EXPECT_EQ(r.get<std::uint32_t>(), 6u);  // of f32
  EXPECT_EQ(r.get<std::uint64_t>(), 2u);
  EXPECT_EQ(r.get<float>(), 0.5f);
  EXPECT_EQ(r.get<float>(), -1.0f);
  EXPECT_EQ(r.str(), "tokenizer.ggml.add_bos_token");
  EXPECT_EQ(r.get<std::uint32_t>(), 7u);  // bool
  EXPECT_EQ(r.get<std::uint8_t>(), 1u);
  EXPECT_EQ(r.str(), "general.alignment");
  EXPECT_EQ(r.get<std::uint32_t>(), 4u);
  EXPECT_EQ(r.get<std::uint32_t>(), 32u);
  // Infos: dimensions innermost first, offsets aligned to 32.
  EXPECT_EQ(r.str(), "v");
  EXPECT_EQ(r.get<std::uint32_t>(), 1u);
  EXPECT_EQ(r.get<std::uint64_t>(), 3u);
  EXPECT_EQ(r.get<std::uint32_t>(), 0u);  // F32
  EXPECT_EQ(r.get<std::uint64_t>(), 0u);
  EXPECT_EQ(r.str(), "m");
  EXPECT_EQ(r.get<std::uint32_t>(), 2u);
  EXPECT_EQ(r.get<std::uint64_t>(), 32u);
  EXPECT_EQ(r.get<std::uint64_t>(), 2u);
  EXPECT_EQ(r.get<std::uint32_t>(), 8u);  // Q8_0
  EXPECT_EQ(r.get<std::uint64_t>(), 32u);
  const std::size_t data = (r.at + 31) / 32 * 32;
  float v[3];
  std::memcpy(v, r.b.data() + data, 12);
  EXPECT_EQ(v[2], 3.0f);
  EXPECT_EQ(static_cast<int>(r.b[data + 32]), 7);
  EXPECT_EQ(r.b.size(), data + 32 + 96);  // 68 bytes padded to 96
}

TEST(GgufFileTest, BadTensorsAndAFailingWriterLeaveNoFile) {
  tailor::testing::TempDir dir;
  const std::string path = dir.file("t.gguf");
  auto fill = [](std::size_t, std::vector<std::byte>& b) {
    b.assign(4, std::byte{0});
    return Status::ok();
  };
  Status s = write_gguf(path, {}, {{"m", {2, 33}, GgmlType::kQ8_0}}, fill);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rows of 33 elements are not whole Q8_0 blocks of 32"), std::string::npos) << s.message();
  s = write_gguf(path, {}, {{"a", {1}, GgmlType::kF32}, {"a", {1}, GgmlType::kF32}}, fill);
  EXPECT_NE(s.message().find("tensor a given twice"), std::string::npos) << s.message();
  s = write_gguf(path, {}, {{"a", {1}, GgmlType::kF32}, {"b", {2}, GgmlType::kF32}}, fill);  // b: 4 bytes, not 8
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("tensor b: 4 bytes given, 8 expected"), std::string::npos) << s.message();
  s = write_gguf(path, {}, {{"a", {1}, GgmlType::kF32}},
                 [](std::size_t, std::vector<std::byte>&) { return Status::io_error("the model went away"); });
  EXPECT_EQ(s.message(), "the model went away");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace tailor::runner::io
