// The GGUF file format (version 3), as llama.cpp reads it
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): written here,
// torch-free; read back in the tests by the `gguf` package and llama.cpp.
//
// Layout: "GGUF", version 3, the tensor and key-value counts (u64), the
// key-value pairs (a string key, a u32 type, the value; strings are a u64
// length and the bytes), the tensor infos (name, dimension count, the
// dimensions innermost first, the ggml type, the data offset), padding to
// general.alignment (32), then each tensor's data at its offset, each padded
// to the alignment. Little-endian throughout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"

namespace tailor::runner::io {

// The ggml tensor types written here (ggml.h's enum ggml_type values).
enum class GgmlType : std::uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBF16 = 30 };
const char* to_string(GgmlType);  // "F32", "F16", "Q8_0", "BF16"

// Elements per block: 32 for Q8_0 (one f16 scale and 32 int8), 1 otherwise.
std::int64_t ggml_block_size(GgmlType);
// Bytes of `n` elements; n a multiple of the block size.
std::size_t ggml_bytes(GgmlType, std::int64_t n);

// Q8_0 of `in` (a multiple of 32 floats) into `out` (ggml_bytes(kQ8_0, n)
// bytes), as gguf-py's quantizer does it, so the bytes equal llama.cpp's
// converter's: per block d = max|x| / 127 in fp32, q = round-half-away(x / d)
// computed as x * (1 / d), d stored as f16 (round to nearest even).
void quantize_q8_0(std::span<const float> in, std::byte* out);
// The f16 bits of `x`, rounded to nearest even (subnormals, infinities and
// NaN kept), as numpy's astype(float16).
std::uint16_t f16_bits(float x);
float f16_value(std::uint16_t bits);

// A metadata value: the GGUF types this writer uses. Integers are u32
// unless they need u64; arrays are of strings, f32 or i32.
using GgufValue = std::variant<std::uint32_t, std::int32_t, std::uint64_t, float, bool, std::string,
                               std::vector<std::string>, std::vector<float>, std::vector<std::int32_t>>;

struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> shape;  // outermost first, as numpy and torch say it (written reversed)
  GgmlType type = GgmlType::kF32;
};

// Writes one tensor's data: exactly ggml_bytes(type, elements) bytes.
using GgufTensorWriter = std::function<Status(std::size_t index, std::vector<std::byte>& bytes)>;

// Writes `path` through `path`.tmp, fsync and rename, so a reader never
// sees half a file: the metadata in order (general.alignment is added when
// absent), the infos, then each tensor's bytes as `data` gives them (one
// tensor in memory at a time). InvalidArgument for a duplicate key or tensor
// name, or a shape whose row is not a whole number of blocks; `data`'s
// error, or IOError naming the file, otherwise (the temporary file removed).
Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                  const std::vector<GgufTensorInfo>& tensors, const GgufTensorWriter& data);

}  // namespace tailor::runner::io
