#include "platform/sqlite.h"

#include <sqlite3.h>

#include <cerrno>
#include <string>
#include <unordered_map>
#include <vector>

#include <utility>

namespace tailor::platform {

namespace {

// One mapping for every failed call: another process holding the database
// is transient (503, retry), a full disk is its own condition (507, freeing
// space helps), anything else an I/O error.
Status status_for(sqlite3* db, int primary_code, std::string msg) {
  if (primary_code == SQLITE_BUSY || primary_code == SQLITE_LOCKED) {
    return Status::unavailable(msg + " (another process holds the database)");
  }
  if (primary_code == SQLITE_FULL || (primary_code == SQLITE_IOERR && sqlite3_system_errno(db) == ENOSPC)) {
    return Status::no_space(msg + " (no space left on the data folder's file system)");
  }
  return Status::io_error(std::move(msg));
}

}  // namespace

// Idle statements by their SQL text. Bounded: the texts are the store's own
// (a filter's label count varies them a little), a few of each at most.
struct StatementCache {
  static constexpr std::size_t kMaxTexts = 128;
  static constexpr std::size_t kMaxEach = 4;
  std::unordered_map<std::string, std::vector<sqlite3_stmt*>> idle;

  sqlite3_stmt* take(std::string_view sql) {
    const auto it = idle.find(std::string(sql));
    if (it == idle.end() || it->second.empty()) return nullptr;
    sqlite3_stmt* s = it->second.back();
    it->second.pop_back();
    return s;
  }
  void give_back(sqlite3_stmt* s) {
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    const char* sql = sqlite3_sql(s);
    auto it = sql ? idle.find(sql) : idle.end();
    if (sql && it == idle.end() && idle.size() < kMaxTexts) it = idle.emplace(sql, std::vector<sqlite3_stmt*>{}).first;
    if (it == idle.end() || it->second.size() >= kMaxEach) {
      sqlite3_finalize(s);
      return;
    }
    it->second.push_back(s);
  }
  ~StatementCache() {
    for (auto& [sql, list] : idle) {
      for (sqlite3_stmt* s : list)
        sqlite3_finalize(s);
    }
  }
};

void Statement::release() {
  if (!stmt_) return;
  if (home_) {
    home_->give_back(stmt_);
  } else {
    sqlite3_finalize(stmt_);
  }
  stmt_ = nullptr;
}

Statement::~Statement() { release(); }

Statement::Statement(Statement&& o) noexcept : db_(o.db_), stmt_(o.stmt_), home_(o.home_), bind_error_(o.bind_error_) {
  o.stmt_ = nullptr;
}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    release();
    db_ = o.db_;
    stmt_ = std::exchange(o.stmt_, nullptr);
    home_ = o.home_;
    bind_error_ = o.bind_error_;
  }
  return *this;
}

Statement& Statement::bind(int i, std::int64_t v) {
  if (int rc = sqlite3_bind_int64(stmt_, i, v); rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}
Statement& Statement::bind(int i, double v) {
  if (int rc = sqlite3_bind_double(stmt_, i, v); rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}
Statement& Statement::bind(int i, std::string_view v) {
  if (int rc = sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8); rc != SQLITE_OK) {
    bind_error_ = rc;
  }
  return *this;
}
Statement& Statement::bind_null(int i) {
  if (int rc = sqlite3_bind_null(stmt_, i); rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

Status Statement::error(std::string_view what) const {
  std::string msg = std::string(what) + ": " + sqlite3_errmsg(db_);
  if (const char* sql = sqlite3_sql(stmt_)) msg += " (in: " + std::string(sql).substr(0, 120) + ")";
  const int code = sqlite3_errcode(db_) & 0xff;
  if (code == SQLITE_CONSTRAINT) return Status::already_exists(msg);
  return status_for(db_, code, std::move(msg));
}

Result<bool> Statement::step() {
  if (bind_error_ != SQLITE_OK) {
    return Status::internal(std::string("binding a parameter: ") + sqlite3_errstr(bind_error_));
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return error("sqlite");
}

Status Statement::run() {
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, step());
    if (!row) return Status::ok();
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = SQLITE_OK;
}

bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
std::int64_t Statement::int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::real(int col) const { return sqlite3_column_double(stmt_, col); }
std::string Statement::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}
std::optional<std::int64_t> Statement::opt_int64(int col) const {
  if (is_null(col)) return std::nullopt;
  return int64(col);
}
std::optional<double> Statement::opt_real(int col) const {
  if (is_null(col)) return std::nullopt;
  return real(col);
}

Result<Database> Database::open(const std::string& path, int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close(raw);
    return Status::io_error("opening " + path + ": " + msg);
  }
  Database db(raw);
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  sqlite3_extended_result_codes(raw, 1);
  // WAL: readers do not block the writer; synchronous FULL by default so an
  // acknowledged job survives a power cut (https://sqlite.org/wal.html,
  // https://sqlite.org/pragma.html#pragma_synchronous).
  auto mode = db.prepare("PRAGMA journal_mode=WAL");
  if (!mode.is_ok()) return mode.status().prefixed(path);
  auto row = mode->step();
  if (!row.is_ok()) return row.status().prefixed(path);
  if (!*row || mode->text(0) != "wal") return Status::io_error(path + ": cannot switch to WAL mode");
  TAILOR_RETURN_IF_ERROR(db.exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;").prefixed(path));
  return db;
}

Database::Database(sqlite3* db) : db_(db), cache_(std::make_unique<StatementCache>()) {}

Database::Database(Database&& o) noexcept : db_(std::exchange(o.db_, nullptr)), cache_(std::move(o.cache_)) {}

Database::~Database() {
  cache_.reset();  // its statements first
  if (db_) sqlite3_close_v2(db_);
}

Database& Database::operator=(Database&& o) noexcept {
  if (this != &o) {
    cache_.reset();
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
    cache_ = std::move(o.cache_);
  }
  return *this;
}

void Database::set_busy_timeout(int ms) { sqlite3_busy_timeout(db_, ms); }

Result<Statement> Database::prepare(std::string_view sql) {
  if (sqlite3_stmt* cached = cache_->take(sql)) return Statement(db_, cached, cache_.get());
  sqlite3_stmt* stmt = nullptr;
  const int rc =
      sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return Status::internal("preparing \"" + std::string(sql.substr(0, 120)) + "\": " + sqlite3_errmsg(db_));
  }
  return Statement(db_, stmt, cache_.get());
}

Status Database::exec(std::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return status_for(db_, rc & 0xff, std::move(msg));
  }
  return Status::ok();
}

std::int64_t Database::changes() const { return sqlite3_changes64(db_); }
std::int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
bool Database::in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

Result<Transaction> Transaction::begin(Database& db) {
  TAILOR_RETURN_IF_ERROR(db.exec("BEGIN IMMEDIATE").prefixed("beginning a write transaction"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_) (void)db_->exec("ROLLBACK");
}

Status Transaction::commit() {
  if (!db_) return Status::internal("transaction already finished");
  Status s = db_->exec("COMMIT");
  if (s.is_ok()) db_ = nullptr;
  return s.prefixed("committing");
}

}  // namespace tailor::platform
