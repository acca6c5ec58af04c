#include "platform/calibration_store.h"

#include <cstdlib>
#include <ctime>
#include <filesystem>

namespace tailor::platform {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS calibration (
  id INTEGER PRIMARY KEY,
  machine TEXT NOT NULL,
  runtime TEXT NOT NULL,
  family TEXT NOT NULL,
  source TEXT NOT NULL,
  summary TEXT NOT NULL,
  predicted_peak REAL NOT NULL,
  measured_peak REAL NOT NULL,
  predicted_tokens_per_second REAL NOT NULL,
  measured_tokens_per_second REAL NOT NULL,
  recorded_at TEXT NOT NULL,
  contention REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS calibration_key ON calibration (machine, runtime, family);
)";

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Result<CalibrationStore> CalibrationStore::open(const std::string& path) {
  std::error_code ec;
  if (const fs::path dir = fs::path(path).parent_path(); !dir.empty()) fs::create_directories(dir, ec);
  if (ec) return Status::io_error("cannot create the folder of " + path + ": " + ec.message());
  TAILOR_ASSIGN_OR_RETURN(Database db, Database::open(path));
  TAILOR_RETURN_IF_ERROR(db.exec(kSchema));
  // A store from before contention was recorded: its records count as
  // measured on an idle machine, as they were taken. Another process may
  // add the column first.
  auto has_contention = [&db]() -> Result<bool> {
    TAILOR_ASSIGN_OR_RETURN(Statement st,
                            db.prepare("SELECT 1 FROM pragma_table_info('calibration') WHERE name = 'contention'"));
    TAILOR_ASSIGN_OR_RETURN(const bool row, st.step());
    st.reset();
    return row;
  };
  TAILOR_ASSIGN_OR_RETURN(const bool had, has_contention());
  if (!had) {
    if (Status s = db.exec("ALTER TABLE calibration ADD COLUMN contention REAL NOT NULL DEFAULT 0"); !s.is_ok()) {
      TAILOR_ASSIGN_OR_RETURN(const bool now, has_contention());
      if (!now) return s;
    }
  }
  return CalibrationStore(std::move(db));
}

Status CalibrationStore::add(CalibrationRecord r) {
  r.recorded_at = utc_now();
  TAILOR_ASSIGN_OR_RETURN(
      Statement st, db_.prepare("INSERT INTO calibration (machine, runtime, family, source, summary, "
                                "predicted_peak, measured_peak, predicted_tokens_per_second, "
                                "measured_tokens_per_second, recorded_at, contention) VALUES (?,?,?,?,?,?,?,?,?,?,?)"));
  st.bind(1, r.key.machine).bind(2, r.key.runtime).bind(3, r.key.family).bind(4, r.source).bind(5, r.summary);
  st.bind(6, r.sample.predicted_peak).bind(7, r.sample.measured_peak);
  st.bind(8, r.sample.predicted_tokens_per_second).bind(9, r.sample.measured_tokens_per_second);
  st.bind(10, r.recorded_at).bind(11, r.sample.contention);
  return st.run();
}

Result<std::vector<CalibrationRecord>> CalibrationStore::records(const std::optional<strategies::CalibrationKey>& key) {
  TAILOR_ASSIGN_OR_RETURN(
      Statement st,
      db_.prepare(
          key ? "SELECT machine, runtime, family, source, summary, predicted_peak, measured_peak, "
                "predicted_tokens_per_second, measured_tokens_per_second, recorded_at, contention FROM calibration "
                "WHERE machine = ? AND runtime = ? AND family = ? ORDER BY id"
              : "SELECT machine, runtime, family, source, summary, predicted_peak, measured_peak, "
                "predicted_tokens_per_second, measured_tokens_per_second, recorded_at, contention FROM calibration "
                "ORDER BY id"));
  if (key) st.bind(1, key->machine).bind(2, key->runtime).bind(3, key->family);
  std::vector<CalibrationRecord> out;
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, st.step());
    if (!row) break;
    CalibrationRecord r;
    r.key = {st.text(0), st.text(1), st.text(2)};
    r.source = st.text(3);
    r.summary = st.text(4);
    r.sample = {st.real(5), st.real(6), st.real(7), st.real(8), st.real(10)};
    r.recorded_at = st.text(9);
    out.push_back(std::move(r));
  }
  return out;
}

Result<strategies::Calibration> CalibrationStore::calibration(const strategies::CalibrationKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const auto rs, records(key));
  std::vector<strategies::CalibrationSample> samples;
  for (const CalibrationRecord& r : rs)
    samples.push_back(r.sample);
  return strategies::fit_calibration(key.text(), samples);
}

Result<std::int64_t> CalibrationStore::reset(const std::optional<std::string>& machine) {
  TAILOR_ASSIGN_OR_RETURN(
      Statement st, db_.prepare(machine ? "DELETE FROM calibration WHERE machine = ?" : "DELETE FROM calibration"));
  if (machine) st.bind(1, *machine);
  TAILOR_RETURN_IF_ERROR(st.run());
  return db_.changes();
}

std::string default_calibration_path() {
  if (const char* p = std::getenv("TAILOR_CALIBRATION"); p != nullptr && *p != '\0') {
    return std::string(p) == "none" ? std::string() : std::string(p);
  }
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x != '\0') {
    return (fs::path(x) / "tailor" / "calibration.db").string();
  }
  const char* home = std::getenv("HOME");
  return (fs::path(home != nullptr && *home != '\0' ? home : ".") / ".local" / "share" / "tailor" / "calibration.db")
      .string();
}

std::optional<strategies::Calibration> load_calibration(const std::string& path, const strategies::CalibrationKey& key,
                                                        std::string* why) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;  // nothing measured yet
  auto store = CalibrationStore::open(path);
  if (!store.is_ok()) {
    if (why) *why = store.status().message();
    return std::nullopt;
  }
  auto c = store->calibration(key);
  if (!c.is_ok()) {
    if (why) *why = c.status().message();
    return std::nullopt;
  }
  if (c->runs == 0) return std::nullopt;
  return *c;
}

}  // namespace tailor::platform
