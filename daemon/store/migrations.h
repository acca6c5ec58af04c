// Versioned schema migrations of the tailord store. Each migration is an SQL
// file in daemon/store/migrations/, embedded at build time and applied once,
// in order, inside its own BEGIN IMMEDIATE transaction; applied versions are
// recorded in schema_migrations. A store newer than this binary is refused.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/store/sqlite.h"

namespace tailor::daemon {

struct Migration {
  int version = 0;
  std::string name;
  const char* sql = nullptr;
};

// The migrations this binary knows, by ascending version.
const std::vector<Migration>& builtin_migrations();

// Applies the missing ones; returns the schema version after.
Result<int> migrate(Database& db, const std::vector<Migration>& migrations = builtin_migrations());

}  // namespace tailor::daemon
