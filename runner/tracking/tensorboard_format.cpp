#include "runner/tracking/tensorboard_format.h"

#include <array>
#include <cstring>

namespace tailor::runner::tracking {
namespace {

constexpr std::uint32_t kCastagnoli = 0x82f63b78;  // reflected polynomial 0x1EDC6F41

const std::array<std::uint32_t, 256>& crc_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Protocol-buffer wire format (varints, tags, length-delimited fields).
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

enum Wire : std::uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

void tag(std::string& out, std::uint32_t field, Wire wire) { varint(out, (field << 3) | wire); }

void bytes_field(std::string& out, std::uint32_t field, std::string_view v) {
  tag(out, field, kLength);
  varint(out, v.size());
  out.append(v);
}

void double_field(std::string& out, std::uint32_t field, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  tag(out, field, kFixed64);
  put_le(out, bits, 8);
}

void float_field(std::string& out, std::uint32_t field, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  tag(out, field, kFixed32);
  put_le(out, bits, 4);
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event_with_summary(double wall_time, std::int64_t step, const std::string& summary) {
  std::string e;
  double_field(e, 1, wall_time);
  tag(e, 2, kVarint);
  varint(e, static_cast<std::uint64_t>(step));
  bytes_field(e, 5, summary);
  return e;
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  const auto& t = crc_table();
  std::uint32_t c = 0xffffffffu;
  for (unsigned char b : data) c = t[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tf_record(std::string_view data) {
  std::string length;
  put_le(length, data.size(), 8);
  std::string out = length;
  out.reserve(data.size() + 16);
  put_le(out, masked_crc32c(length), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e;
  double_field(e, 1, wall_time);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalar_event(double wall_time, std::int64_t step, std::string_view tag_name, float value) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string v;
  bytes_field(v, 1, tag_name);
  float_field(v, 2, value);
  std::string summary;
  bytes_field(summary, 1, v);
  return event_with_summary(wall_time, step, summary);
}

std::string text_event(double wall_time, std::int64_t step, std::string_view tag_name, std::string_view text) {
  // Value { string tag = 1; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
  // TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto shape = 2 (empty: a scalar);
  //               repeated bytes string_val = 8; }
  // SummaryMetadata { PluginData plugin_data = 1 { string plugin_name = 1; } }
  std::string tensor;
  tag(tensor, 1, kVarint);
  varint(tensor, 7);
  bytes_field(tensor, 2, "");
  bytes_field(tensor, 8, text);
  std::string plugin;
  bytes_field(plugin, 1, "text");
  std::string metadata;
  bytes_field(metadata, 1, plugin);
  std::string v;
  bytes_field(v, 1, tag_name);
  bytes_field(v, 8, tensor);
  bytes_field(v, 9, metadata);
  std::string summary;
  bytes_field(summary, 1, v);
  return event_with_summary(wall_time, step, summary);
}

}  // namespace tailor::runner::tracking
