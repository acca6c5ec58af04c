// How a server (daemon/serving/completion_worker.h) speaks to a
// `tailor-runner serve` process: one request a line on its stdin, the
// route, a space and the JSON body ("/v1/chat/completions {...}"); one reply
// a line on its stdout, {"status": HTTP status, "body": response}, before
// which a streamed reply ("stream": true) writes its chunks, one line
// {"chunk": {...}} each. While a request is answered, streamed or not, the
// line "cancel" says its client has left: the process stops its generation
// at its next token and ends it with {"status": 200, "body": null}. A cancel
// line read after its reply ended cancels nothing.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace tailor::runner {

inline constexpr std::string_view kCompletionsRoute = "/v1/completions";
inline constexpr std::string_view kChatCompletionsRoute = "/v1/chat/completions";
// How a chunk line begins; the chunk's JSON and "}" follow.
inline constexpr std::string_view kChunkLinePrefix = "{\"chunk\":";

inline constexpr std::string_view kCancelLine = "cancel";

// The request line for `route` and a body on one line (JSON without newlines).
inline std::string serve_request_line(std::string_view route, std::string_view one_line_body) {
  std::string line(route);
  line += ' ';
  line += one_line_body;
  return line;
}

// {route, body} of a request line; the body is empty when there is none.
inline std::pair<std::string, std::string> split_serve_request(const std::string& line) {
  const auto space = line.find(' ');
  if (space == std::string::npos) return {line, ""};
  return {line.substr(0, space), line.substr(space + 1)};
}

}  // namespace tailor::runner
