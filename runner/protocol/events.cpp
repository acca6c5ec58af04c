#include "runner/protocol/events.h"

#include <cstring>

#include <nlohmann/json.hpp>

namespace tailor::runner::events {

std::optional<RunnerExit> exit_from_events(const std::vector<std::string>& lines) {
  using nlohmann::json;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const json j = json::parse(*it, nullptr, false);
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) continue;
    const std::string kind = j["event"].get<std::string>();
    if (kind == kStart || kind == kResume) return std::nullopt;  // ended without a word: killed
    std::optional<RunnerExit> implied;
    if (kind == kDone) implied = RunnerExit::kOk;
    if (kind == kOom) implied = RunnerExit::kOutOfMemory;
    if (kind == kCancelled) implied = RunnerExit::kCancelled;
    if (kind == kError) implied = RunnerExit::kFailure;
    if (!implied) continue;
    if (auto code = j.find(kExitCodeKey); code != j.end() && code->is_number_integer()) {
      if (auto e = runner_exit_from_status(code->get<int>())) return e;
    }
    return implied;
  }
  return std::nullopt;
}

}  // namespace tailor::runner::events
