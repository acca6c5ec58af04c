#include "daemon/store/migrations.h"

#include <chrono>

extern const char tailor_daemon_migration_0001[];
extern const char tailor_daemon_migration_0002[];
extern const char tailor_daemon_migration_0003[];
extern const char tailor_daemon_migration_0004[];
extern const char tailor_daemon_migration_0005[];
extern const char tailor_daemon_migration_0006[];
extern const char tailor_daemon_migration_0007[];
extern const char tailor_daemon_migration_0008[];
extern const char tailor_daemon_migration_0009[];
extern const char tailor_daemon_migration_0010[];
extern const char tailor_daemon_migration_0011[];
extern const char tailor_daemon_migration_0012[];

namespace tailor::daemon {

const std::vector<Migration>& builtin_migrations() {
  static const std::vector<Migration> kMigrations = {
      {1, "0001_initial", tailor_daemon_migration_0001},
      {2, "0002_store_probe", tailor_daemon_migration_0002},
      {3, "0003_jobs_by_state_seq", tailor_daemon_migration_0003},
      {4, "0004_plan_summary", tailor_daemon_migration_0004},
      {5, "0005_labels_by_seq", tailor_daemon_migration_0005},
      {6, "0006_executor", tailor_daemon_migration_0006},
      {7, "0007_eval_loss", tailor_daemon_migration_0007},
      {8, "0008_preference", tailor_daemon_migration_0008},
      {9, "0009_deleted_jobs", tailor_daemon_migration_0009},
      {10, "0010_reward_metrics", tailor_daemon_migration_0010},
      {11, "0011_kto_kl", tailor_daemon_migration_0011},
      {12, "0012_mfu", tailor_daemon_migration_0012},
  };
  return kMigrations;
}

Result<int> migrate(Database& db, const std::vector<Migration>& migrations) {
  TAILOR_RETURN_IF_ERROR(db.exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
                                 "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)")
                             .prefixed("creating schema_migrations"));
  int current = 0;
  {
    TAILOR_ASSIGN_OR_RETURN(Statement q, db.prepare("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (row) current = static_cast<int>(q.int64(0));
  }
  const int newest = migrations.empty() ? 0 : migrations.back().version;
  if (current > newest) {
    return Status::failed_precondition("the store is at schema version " + std::to_string(current) +
                                       ", newer than this tailord (" + std::to_string(newest) +
                                       "); use a newer tailord");
  }
  for (const Migration& m : migrations) {
    if (m.version <= current) continue;
    // The version check is repeated inside the write lock: two processes
    // starting at once must not both apply a migration.
    TAILOR_ASSIGN_OR_RETURN(Transaction tx, Transaction::begin(db));
    TAILOR_ASSIGN_OR_RETURN(Statement q, db.prepare("SELECT 1 FROM schema_migrations WHERE version = ?1"));
    q.bind(1, m.version);
    TAILOR_ASSIGN_OR_RETURN(const bool applied, q.step());
    if (!applied) {
      TAILOR_RETURN_IF_ERROR(db.exec(m.sql).prefixed("migration " + m.name));
      TAILOR_ASSIGN_OR_RETURN(Statement ins,
                              db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)"));
      const double now =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      ins.bind(1, m.version).bind(2, m.name).bind(3, now);
      TAILOR_RETURN_IF_ERROR(ins.run());
    }
    TAILOR_RETURN_IF_ERROR(tx.commit().prefixed("migration " + m.name));
    current = m.version;
  }
  return current;
}

}  // namespace tailor::daemon
