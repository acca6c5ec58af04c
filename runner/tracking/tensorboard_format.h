// TensorBoard's event-file format, written without TensorFlow or protobuf:
// the TFRecord framing (a length and its masked CRC-32C, the bytes and
// their masked CRC-32C) around `Event` messages encoded by hand, as
// tensorboard/compat/proto/event.proto and summary.proto define them.
// Only what the trackers write: the file-version event, scalars
// (Summary.Value.simple_value, which TensorBoard's scalar dashboard and
// event accumulator read) and text (a string tensor under the text plugin).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tailor::runner::tracking {

// CRC-32C (Castagnoli), and the masked form TFRecord stores:
// rotate right by 15, plus 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h).
std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);

// One record: uint64 length, uint32 masked CRC of the length's 8 bytes, the
// data, uint32 masked CRC of the data, all little-endian.
std::string tf_record(std::string_view data);

// Serialised Event messages.
std::string file_version_event(double wall_time);  // "brain.Event:2", the first event of a file
std::string scalar_event(double wall_time, std::int64_t step, std::string_view tag, float value);
std::string text_event(double wall_time, std::int64_t step, std::string_view tag, std::string_view text);

}  // namespace tailor::runner::tracking
