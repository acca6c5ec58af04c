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
    if (kind == kStart || kind == kResume || kind == kLaunch) return std::nullopt;  // ended without a word: killed
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

namespace {

// The last terminal event of the run in `lines` (as exit_from_events finds it).
std::optional<nlohmann::json> last_terminal(const std::vector<std::string>& lines) {
  using nlohmann::json;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    json j = json::parse(*it, nullptr, false);
    if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) continue;
    const std::string kind = j["event"].get<std::string>();
    if (kind == kStart || kind == kResume || kind == kLaunch) return std::nullopt;
    if (kind == kDone || kind == kOom || kind == kCancelled || kind == kError) return j;
  }
  return std::nullopt;
}

int weight(std::optional<RunnerExit> e, bool rank0) {
  if (!e) return 0;
  switch (*e) {
    case RunnerExit::kOutOfMemory:
      return 5;
    case RunnerExit::kBadInput:
    case RunnerExit::kDiverged:  // every rank sees the same reduced loss
      return 4;
    case RunnerExit::kFailure:
      return rank0 ? 3 : 2;
    case RunnerExit::kOk:
    case RunnerExit::kCancelled:
      return 1;
  }
  return 0;
}

}  // namespace

std::optional<std::string> deciding_rank_event(const std::vector<std::vector<std::string>>& lines_by_rank) {
  if (lines_by_rank.size() < 2) return std::nullopt;
  const int own = weight(exit_from_events(lines_by_rank[0]), true);
  int best = own;
  std::optional<nlohmann::json> chosen;
  for (std::size_t r = 1; r < lines_by_rank.size(); ++r) {
    const int w = weight(exit_from_events(lines_by_rank[r]), false);
    // A failure only: another rank's "done" says nothing rank 0's lacks.
    if (w < 2 || w <= best) continue;
    if (auto t = last_terminal(lines_by_rank[r])) {
      best = w;
      chosen = std::move(*t);
      (*chosen)["rank"] = static_cast<int>(r);
    }
  }
  if (!chosen) return std::nullopt;
  return chosen->dump();
}

}  // namespace tailor::runner::events
