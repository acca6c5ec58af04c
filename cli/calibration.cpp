#include "cli/calibration.h"

#include <ostream>

#include "platform/calibration_store.h"

namespace tailor::cli {

std::vector<FlagSpec> with_calibration_flags(std::vector<FlagSpec> flags) {
  flags.push_back({"calibration", true});
  flags.push_back({"no-calibration", false});
  return flags;
}

std::string calibration_path(const Args& args) {
  if (args.has("no-calibration")) return {};
  return args.has("calibration") ? args.get("calibration") : platform::default_calibration_path();
}

std::optional<strategies::Calibration> calibration_for(const std::string& path, const dsl::JobSpec& spec,
                                                       const strategies::Hardware& hw, Streams io) {
  if (path.empty()) return std::nullopt;
  std::string why;
  auto c = platform::load_calibration(path, strategies::calibration_key(spec, hw), &why);
  if (!why.empty()) io.err << "tailor: warning: calibration store " << path << ": " << why << " (not calibrated)\n";
  return c;
}

void record_calibration(const std::string& path, const std::vector<runner::CalibrationRun>& runs, Streams io) {
  if (path.empty() || runs.empty()) return;
  auto store = platform::CalibrationStore::open(path);
  Status s = store.is_ok() ? Status::ok() : store.status();
  for (const runner::CalibrationRun& r : runs) {
    if (!s.is_ok()) break;
    s = store->add({r.key, r.source, r.summary, r.sample, {}});
  }
  if (!s.is_ok()) io.err << "tailor: warning: calibration store " << path << ": " << s.message() << "\n";
}

}  // namespace tailor::cli
