// `tailor calibration show|reset`: what this machine's probes and runs
// measured against their plans (platform/calibration_store.h), the factors
// later plans take from it, and clearing it.
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/calibration.h"
#include "cli/commands.h"
#include "cli/job_view.h"
#include "core/units.h"
#include "platform/calibration_store.h"

namespace tailor::cli {
namespace {

constexpr const char* kCalibrationHelp = R"(usage: tailor calibration show [--output json] [--calibration FILE]
       tailor calibration reset [--machine NAME] [--calibration FILE]

The calibration store: what each probe (strategy.probe, tailor plan --probe)
and each run of `tailor run` measured against its plan's prediction, by
machine (the GPU's name, or cpu and its processor), runtime and model family. Later plans for
the same key multiply their peak estimates by the median measured/predicted
ratio (never below 1, at most 1.5) and their speeds by the median speed
ratio (0.2 to 5), and say so; only a key's newest 20 records count. A speed
measured while other processes held more than a quarter of the cores the
run needed (its contention) is left out of the speed factor: it says more
about them than about the machine. tailord keeps its own store in its data
folder (DATA_DIR/calibration.db: pass it as --calibration).

  show    the factors of each key, from how many runs, and (--output json)
          every record
  reset   remove every record, or only --machine NAME's

options:
  --calibration FILE  the store (default: $TAILOR_CALIBRATION, else
                      $XDG_DATA_HOME/tailor/calibration.db, else
                      ~/.local/share/tailor/calibration.db;
                      TAILOR_CALIBRATION=none: no store at all)
  --machine NAME      reset: only this machine's records
  --output FORMAT     show: text (default) or json
  -h, --help          show this help
)";

int show(const std::vector<platform::CalibrationRecord>& records, const std::string& path, bool json, Streams io) {
  std::map<std::string, std::pair<strategies::CalibrationKey, std::vector<strategies::CalibrationSample>>> keys;
  for (const auto& r : records) {
    auto& slot = keys[r.key.text()];
    slot.first = r.key;
    slot.second.push_back(r.sample);
  }
  if (json) {
    nlohmann::ordered_json out = {
        {"file", path}, {"keys", nlohmann::ordered_json::array()}, {"records", nlohmann::ordered_json::array()}};
    for (const auto& [text, k] : keys) {
      const strategies::Calibration c = strategies::fit_calibration(text, k.second);
      out["keys"].push_back({{"machine", k.first.machine},
                             {"runtime", k.first.runtime},
                             {"family", k.first.family},
                             {"runs", c.runs},
                             {"busy_runs", c.busy},
                             {"memory_factor", c.memory},
                             {"speed_factor", c.speed}});
    }
    for (const auto& r : records) {
      out["records"].push_back({{"machine", r.key.machine},
                                {"runtime", r.key.runtime},
                                {"family", r.key.family},
                                {"source", r.source},
                                {"summary", r.summary},
                                {"predicted_peak_bytes", r.sample.predicted_peak},
                                {"measured_peak_bytes", r.sample.measured_peak},
                                {"predicted_tokens_per_second", r.sample.predicted_tokens_per_second},
                                {"measured_tokens_per_second", r.sample.measured_tokens_per_second},
                                {"contention", r.sample.contention},
                                {"recorded_at", r.recorded_at}});
    }
    io.out << out.dump(2) << "\n";
    return kExitOk;
  }
  io.out << "calibration store " << path << ": " << records.size()
         << (records.size() == 1 ? " record\n" : " records\n");
  if (keys.empty()) {
    io.out << "nothing measured yet: plans are not calibrated (strategy.probe, tailor plan --probe and tailor run "
              "record here)\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"machine", "runtime", "family", "runs", "busy", "memory", "speed"}};
  for (const auto& [text, k] : keys) {
    const strategies::Calibration c = strategies::fit_calibration(text, k.second);
    char mem[32], speed[32];
    std::snprintf(mem, sizeof mem, "x%.3f", c.memory);
    std::snprintf(speed, sizeof speed, "x%.3f", c.speed);
    rows.push_back(
        {k.first.machine, k.first.runtime, k.first.family, std::to_string(c.runs), std::to_string(c.busy), mem, speed});
  }
  io.out << format_columns(rows);
  io.out << "busy: speeds measured while other processes held the cores, left out of the speed factor\n";
  return kExitOk;
}

}  // namespace

int run_calibration(const Argv& argv, Streams io) {
  auto command = parse_command(argv, with_calibration_flags({{"output", true}, {"machine", true}}), "calibration",
                               kCalibrationHelp, io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  const auto& pos = args.positional();
  const std::string format = args.get("output", "text");
  if (pos.size() != 1 || (pos[0] != "show" && pos[0] != "reset") || (format != "text" && format != "json") ||
      args.has("no-calibration")) {
    io.err << "tailor calibration: expected show or reset"
           << (args.has("no-calibration") ? " (without --no-calibration)" : "") << "\n"
           << kCalibrationHelp;
    return kExitUsage;
  }
  if (pos[0] == "show" && args.has("machine")) {
    io.err << "tailor calibration: --machine goes with reset\n";
    return kExitUsage;
  }
  const std::string path = calibration_path(args);
  if (path.empty()) {
    io.err << "tailor calibration: TAILOR_CALIBRATION=none: there is no store (name one with --calibration FILE)\n";
    return kExitUsage;
  }
  const std::optional<std::string> machine =
      args.has("machine") ? std::optional<std::string>(args.get("machine")) : std::nullopt;
  // Neither command creates a store (nor its folder) where there is none.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (pos[0] == "show") {
      const std::vector<platform::CalibrationRecord> none;
      return show(none, path, format == "json", io);
    }
    io.out << "removed 0 records" << (machine ? " of " + *machine : std::string()) << ": there is no store at " << path
           << "\n";
    return kExitOk;
  }
  auto store = platform::CalibrationStore::open(path);
  if (!store.is_ok()) {
    io.err << "tailor calibration: " << store.status().message() << "\n";
    return kExitInvalid;
  }
  if (pos[0] == "show") {
    auto records = store->records();
    if (!records.is_ok()) {
      io.err << "tailor calibration: " << records.status().message() << "\n";
      return kExitInvalid;
    }
    return show(*records, path, format == "json", io);
  }
  auto removed = store->reset(machine);
  if (!removed.is_ok()) {
    io.err << "tailor calibration: " << removed.status().message() << "\n";
    return kExitInvalid;
  }
  io.out << "removed " << *removed << (*removed == 1 ? " record" : " records")
         << (machine ? " of " + *machine : std::string()) << " from " << path << "\n";
  return kExitOk;
}

}  // namespace tailor::cli
