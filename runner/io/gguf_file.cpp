#include "runner/io/gguf_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "platform/files.h"

namespace tailor::runner::io {
namespace {

using platform::errno_text;
using platform::write_all;

static_assert(std::endian::native == std::endian::little, "GGUF is written little-endian");

constexpr std::uint32_t kVersion = 3;
constexpr std::uint64_t kAlignment = 32;  // general.alignment's default

// GGUF's value types (gguf.h's enum gguf_type).
enum : std::uint32_t {
  kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10,
};

std::uint64_t aligned(std::uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// The bytes of the header, appended to as it is built.
class Bytes {
 public:
  template <class T>
  void pod(const T& v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    out_.append(p, sizeof v);
  }
  void str(const std::string& s) {
    pod(static_cast<std::uint64_t>(s.size()));
    out_.append(s);
  }
  void value(const GgufValue& v) {
    struct Visitor {
      Bytes& b;
      void operator()(std::uint32_t x) const { b.pod(kU32), b.pod(x); }
      void operator()(std::int32_t x) const { b.pod(kI32), b.pod(x); }
      void operator()(std::uint64_t x) const { b.pod(kU64), b.pod(x); }
      void operator()(float x) const { b.pod(kF32), b.pod(x); }
      void operator()(bool x) const { b.pod(kBool), b.pod(static_cast<std::uint8_t>(x)); }
      void operator()(const std::string& x) const { b.pod(kString), b.str(x); }
      void operator()(const std::vector<std::string>& x) const {
        b.array_head(kString, x.size());
        for (const auto& s : x) b.str(s);
      }
      void operator()(const std::vector<float>& x) const {
        b.array_head(kF32, x.size());
        for (float f : x) b.pod(f);
      }
      void operator()(const std::vector<std::int32_t>& x) const {
        b.array_head(kI32, x.size());
        for (std::int32_t i : x) b.pod(i);
      }
    };
    std::visit(Visitor{*this}, v);
  }
  void array_head(std::uint32_t type, std::size_t n) {
    pod(kArray);
    pod(type);
    pod(static_cast<std::uint64_t>(n));
  }
  void pad() { out_.append(aligned(out_.size()) - out_.size(), '\0'); }
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

}  // namespace

const char* to_string(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kBF16: return "BF16";
  }
  return "?";
}

std::int64_t ggml_block_size(GgmlType t) { return t == GgmlType::kQ8_0 ? 32 : 1; }

std::size_t ggml_bytes(GgmlType t, std::int64_t n) {
  const auto u = static_cast<std::size_t>(n);
  switch (t) {
    case GgmlType::kF32: return u * 4;
    case GgmlType::kF16:
    case GgmlType::kBF16: return u * 2;
    case GgmlType::kQ8_0: return u / 32 * 34;
  }
  return 0;
}

// ggml's portable fp32 -> fp16 (after Maratyszcza's FP16 library): the
// float arithmetic does the rounding to nearest even.
std::uint16_t f16_bits(float f) {
  const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const std::uint32_t w = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000u;
  std::uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(base);
  const std::uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const std::uint32_t mantissa_bits = bits & 0x00000FFFu;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float f16_value(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;
  const float normalized = std::bit_cast<float>((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  const std::uint32_t result =
      sign | (two_w < (1u << 27) ? std::bit_cast<std::uint32_t>(denormalized) : std::bit_cast<std::uint32_t>(normalized));
  return std::bit_cast<float>(result);
}

void quantize_q8_0(std::span<const float> in, std::byte* out) {
  for (std::size_t b = 0; b + 32 <= in.size(); b += 32, out += 34) {
    float amax = 0;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(in[b + i]));
    const float d = amax / 127.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    const std::uint16_t h = f16_bits(d);
    std::memcpy(out, &h, 2);
    for (std::size_t i = 0; i < 32; ++i) {
      // roundf rounds halves away from zero, as gguf-py's np_roundf.
      const auto q = static_cast<std::int8_t>(std::roundf(in[b + i] * id));
      std::memcpy(out + 2 + i, &q, 1);
    }
  }
}

Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                  const std::vector<GgufTensorInfo>& tensors, const GgufTensorWriter& data) {
  Bytes head;
  head.pod(static_cast<std::uint32_t>(0x46554747));  // "GGUF"
  head.pod(kVersion);
  head.pod(static_cast<std::uint64_t>(tensors.size()));
  std::set<std::string> keys;
  for (const auto& [key, value] : metadata) {
    if (!keys.insert(key).second) return Status::invalid_argument(path + ": metadata key " + key + " given twice");
  }
  const bool add_alignment = !keys.contains("general.alignment");
  head.pod(static_cast<std::uint64_t>(metadata.size() + (add_alignment ? 1 : 0)));
  for (const auto& [key, value] : metadata) {
    head.str(key);
    head.value(value);
  }
  if (add_alignment) {
    head.str("general.alignment");
    head.value(static_cast<std::uint32_t>(kAlignment));
  }
  std::set<std::string> names;
  std::vector<std::size_t> sizes;
  std::uint64_t offset = 0;
  for (const GgufTensorInfo& t : tensors) {
    if (!names.insert(t.name).second) return Status::invalid_argument(path + ": tensor " + t.name + " given twice");
    if (t.shape.empty() || t.shape.back() % ggml_block_size(t.type) != 0) {
      return Status::invalid_argument(path + ": tensor " + t.name + ": rows of " +
                                      std::to_string(t.shape.empty() ? 0 : t.shape.back()) + " elements are not whole " +
                                      to_string(t.type) + " blocks of " + std::to_string(ggml_block_size(t.type)));
    }
    head.str(t.name);
    head.pod(static_cast<std::uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) head.pod(static_cast<std::uint64_t>(*d));
    head.pod(static_cast<std::uint32_t>(t.type));
    head.pod(offset);
    sizes.push_back(ggml_bytes(t.type, elements(t.shape)));
    offset += aligned(sizes.back());
  }
  head.pad();

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error("cannot create " + tmp + ": " + errno_text());
  auto fail = [&](Status s) {
    ::close(fd);
    std::remove(tmp.c_str());
    return s;
  };
  if (!write_all(fd, head.text().data(), head.text().size())) {
    return fail(Status::io_error("writing " + path + ": " + errno_text()));
  }
  std::vector<std::byte> bytes;
  static const char zeros[kAlignment] = {};
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    bytes.clear();
    if (Status s = data(i, bytes); !s.is_ok()) return fail(s);
    if (bytes.size() != sizes[i]) {
      return fail(Status::internal(path + ": tensor " + tensors[i].name + ": " + std::to_string(bytes.size()) +
                                   " bytes given, " + std::to_string(sizes[i]) + " expected"));
    }
    if (!write_all(fd, bytes.data(), bytes.size()) || !write_all(fd, zeros, aligned(sizes[i]) - sizes[i])) {
      return fail(Status::io_error("writing " + path + ": " + errno_text()));
    }
  }
  // fsync before the rename, as write_safetensors does.
  if (::fsync(fd) != 0) return fail(Status::io_error("writing " + path + ": " + errno_text()));
  if (::close(fd) != 0) {
    std::remove(tmp.c_str());
    return Status::io_error("writing " + path + ": " + errno_text());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(tmp.c_str());
    return Status::io_error("renaming " + tmp + " to " + path + ": " + why);
  }
  return Status::ok();
}

}  // namespace tailor::runner::io
