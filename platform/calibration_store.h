// The calibration store: what each probe and each finished job on this
// machine measured against what its plan predicted, in a SQLite file, read
// back as strategies/calibration.h's factors for later plans. `tailor plan`
// and `tailor run` use the user's file (default_calibration_path), tailord
// its data folder's; `tailor calibration show|reset` reads and clears one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "platform/sqlite.h"
#include "strategies/calibration.h"

namespace tailor::platform {

struct CalibrationRecord {
  strategies::CalibrationKey key;
  std::string source;   // "probe" (a candidate measured before training) or "job" (a finished run)
  std::string summary;  // the strategy measured
  strategies::CalibrationSample sample;
  std::string recorded_at;  // UTC, ISO 8601 (set by add)
};

class CalibrationStore {
 public:
  // Opens (creating, with its folder) the store at `path`.
  static Result<CalibrationStore> open(const std::string& path);

  Status add(CalibrationRecord r);
  // Every record, oldest first; only `key`'s when given.
  Result<std::vector<CalibrationRecord>> records(const std::optional<strategies::CalibrationKey>& key = {});
  // The factors of `key`'s records (runs 0 without any).
  Result<strategies::Calibration> calibration(const strategies::CalibrationKey& key);
  // Removes every record (only `machine`'s when given); how many went.
  Result<std::int64_t> reset(const std::optional<std::string>& machine = {});

 private:
  explicit CalibrationStore(Database db) : db_(std::move(db)) {}
  Database db_;
};

// $TAILOR_CALIBRATION, else $XDG_DATA_HOME/tailor/calibration.db, else
// ~/.local/share/tailor/calibration.db; empty when TAILOR_CALIBRATION is
// "none" (no store: plans are not calibrated and nothing is recorded).
std::string default_calibration_path();

// For planners: the calibration of `key` in the store at `path`, nullopt
// without records or when the store cannot be read (planning goes on
// uncalibrated; `why` says why when given).
std::optional<strategies::Calibration> load_calibration(const std::string& path, const strategies::CalibrationKey& key,
                                                        std::string* why = nullptr);

}  // namespace tailor::platform
