#include "cli/sse_reader.h"

#include <charconv>

namespace tailor::cli {

std::vector<SseMessage> SseReader::feed(const std::string& piece) {
  std::vector<SseMessage> out;
  pending_ += piece;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = pending_.find('\n', start);
    if (end == std::string::npos) break;
    std::string text = pending_.substr(start, end - start);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    line(text, out);
    start = end + 1;
  }
  pending_.erase(0, start);
  return out;
}

void SseReader::line(const std::string& text, std::vector<SseMessage>& out) {
  if (text.empty()) {
    // A message without data is dispatched by nobody (the spec's rule).
    if (has_data_) out.push_back(std::move(current_));
    current_ = SseMessage{};
    has_data_ = false;
    return;
  }
  if (text.front() == ':') return;
  const std::size_t colon = text.find(':');
  const std::string field = text.substr(0, colon);
  std::string value = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.erase(0, 1);
  if (field == "data") {
    if (has_data_) current_.data += '\n';
    current_.data += value;
    has_data_ = true;
  } else if (field == "event") {
    current_.event = value;
  } else if (field == "id") {
    std::int64_t id = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), id);
    current_.id =
        ec == std::errc() && end == value.data() + value.size() ? std::optional<std::int64_t>(id) : std::nullopt;
  }
}

}  // namespace tailor::cli
