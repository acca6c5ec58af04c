// A thin RAII layer over SQLite: a connection, prepared statements with
// typed binds and columns, and an immediate write transaction. Every SQL
// text goes through prepare(); values are bound, never spliced into SQL.
// Not thread-safe: one Database per thread, or a caller-held lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tailor::platform {

// A connection's prepared statements kept for reuse (Database::prepare).
struct StatementCache;

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, sqlite3_stmt* stmt, StatementCache* home = nullptr) : db_(db), stmt_(stmt), home_(home) {}
  ~Statement();
  Statement(Statement&& o) noexcept;
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binds are 1-based, as in SQLite. They return *this for chaining; a bind
  // error surfaces at the next step().
  Statement& bind(int i, std::int64_t v);
  Statement& bind(int i, int v) { return bind(i, static_cast<std::int64_t>(v)); }
  Statement& bind(int i, double v);
  Statement& bind(int i, std::string_view v);
  Statement& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Statement& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Statement& bind_null(int i);
  template <class T>
  Statement& bind(int i, const std::optional<T>& v) {
    return v ? bind(i, *v) : bind_null(i);
  }

  // true: a row is available; false: done. Errors name the SQL.
  Result<bool> step();
  // Runs to completion, ignoring rows.
  Status run();
  // Ready for new binds and steps.
  void reset();

  bool is_null(int col) const;
  std::int64_t int64(int col) const;
  double real(int col) const;
  std::string text(int col) const;
  std::optional<std::int64_t> opt_int64(int col) const;
  std::optional<double> opt_real(int col) const;

 private:
  void release();  // back to its cache, or finalized
  Status error(std::string_view what) const;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  StatementCache* home_ = nullptr;  // given back there, reset, when done with
  int bind_error_ = 0;
};

class Database {
 public:
  // Opens (creating) `path` in WAL mode with foreign keys on and a busy
  // timeout, so a second process or connection waits instead of failing.
  static Result<Database> open(const std::string& path, int busy_timeout_ms = 5000);
  ~Database();
  Database(Database&& o) noexcept;
  Database& operator=(Database&& o) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // How long a statement waits for another process' lock before failing.
  void set_busy_timeout(int ms);
  // A statement for `sql`: one prepared earlier for the same text and done
  // with, or a new one (compiling SQL was a tenth of a submission's time).
  Result<Statement> prepare(std::string_view sql);
  // Runs SQL without parameters (pragmas, migration scripts with several statements).
  Status exec(std::string_view sql);
  std::int64_t changes() const;
  std::int64_t last_insert_rowid() const;
  // Inside BEGIN ... COMMIT. SQLite ends a transaction on its own after some
  // errors (a full disk, an I/O error); this tells whether it did.
  bool in_transaction() const;

 private:
  explicit Database(sqlite3* db);
  sqlite3* db_ = nullptr;
  std::unique_ptr<StatementCache> cache_;  // on the heap: statements point at it while the Database moves
};

// BEGIN IMMEDIATE ... COMMIT: takes the write lock up front, so two writers
// never deadlock upgrading read locks. Rolls back unless commit() succeeded.
class Transaction {
 public:
  static Result<Transaction> begin(Database& db);
  ~Transaction();
  Transaction(Transaction&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Status commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_ = nullptr;
};

}  // namespace tailor::platform
