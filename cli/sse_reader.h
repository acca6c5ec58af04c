// Splits a text/event-stream body, as it arrives in pieces of any size,
// into messages (https://html.spec.whatwg.org/multipage/server-sent-events.html
// section 9.2.6): lines of "field: value", a blank line ends a message,
// lines starting with ':' are comments. Fields other than id, event and
// data are ignored; several data lines are joined with '\n'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tailor::cli {

struct SseMessage {
  std::optional<std::int64_t> id;  // none, or not a number
  std::string event = "message";
  std::string data;
};

class SseReader {
 public:
  // The messages that `piece` completes.
  std::vector<SseMessage> feed(const std::string& piece);

 private:
  void line(const std::string& text, std::vector<SseMessage>& out);
  std::string pending_;  // an incomplete line
  SseMessage current_;
  bool has_data_ = false;
};

}  // namespace tailor::cli
