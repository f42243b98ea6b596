#include "daemon/store/store.h"

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::store {
namespace {

absl::StatusOr<int> UserVersion(sqlite3* db) {
  ASSIGN_OR_RETURN(Stmt stmt, Stmt::Prepare(db, "PRAGMA user_version"));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::InternalError("PRAGMA user_version returned no row");
  return static_cast<int>(stmt.ColumnInt(0));
}

absl::Status Configure(sqlite3* db) {
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  // journal_mode answers with the mode in force; anything but "wal" means
  // the file system could not do it (and is worth failing over).
  ASSIGN_OR_RETURN(Stmt wal, Stmt::Prepare(db, "PRAGMA journal_mode=WAL"));
  ASSIGN_OR_RETURN(bool row, wal.Step());
  if (!row || wal.ColumnText(0) != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("journal_mode=WAL not accepted (mode is \"",
                     row ? wal.ColumnText(0) : "", "\")"));
  }
  return Exec(db,
              "PRAGMA foreign_keys=ON;"
              "PRAGMA synchronous=NORMAL;");
}

absl::Status QuickCheck(sqlite3* db) {
  ASSIGN_OR_RETURN(Stmt stmt, Stmt::Prepare(db, "PRAGMA quick_check"));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (row && stmt.ColumnText(0) == "ok") return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "integrity check failed: ", row ? stmt.ColumnText(0) : "no result"));
}

absl::Status Migrate(sqlite3* db, int from,
                     std::span<const Migration> migrations) {
  for (const Migration& m : migrations) {
    if (m.version <= from) continue;
    RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE"));
    absl::Status s = Exec(db, m.sql);
    if (s.ok()) {
      s = Exec(db, absl::StrCat("PRAGMA user_version=", m.version));
    }
    if (!s.ok()) {
      Exec(db, "ROLLBACK").IgnoreError();  // Report the migration's error.
      return Annotate(s,
                      absl::StrCat("migration to schema version ", m.version));
    }
    RETURN_IF_ERROR(Exec(db, "COMMIT"));
  }
  return absl::OkStatus();
}

absl::Status OpenImpl(const std::string& path, const Store::Options& options,
                      DbHandle* out_db, int* out_v) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &raw,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  DbHandle db(raw);
  if (rc != SQLITE_OK) return SqliteError("open", db.get(), rc);
  // One myceld per state directory (the daemon lock) and one connection:
  // holding the file lock for good spares every transaction its lock and
  // unlock system calls, and set before the first access of a WAL database
  // it keeps the WAL index in memory instead of a shared-memory file. Other
  // processes cannot read the database while myceld runs (SQLITE_BUSY).
  // The pragma only sets a flag; it reads nothing.
  RETURN_IF_ERROR(Exec(db.get(), "PRAGMA locking_mode=EXCLUSIVE"));
  // Reading the header is the first thing that notices a file that is not
  // a database, so do it before changing any setting.
  ASSIGN_OR_RETURN(int version, UserVersion(db.get()));
  std::span<const Migration> migrations =
      options.migrations.empty() ? BuiltinMigrations() : options.migrations;
  int latest = migrations.empty() ? 0 : migrations.back().version;
  if (version > latest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "schema version ", version, " is newer than this myceld supports (",
        latest, "); run a newer myceld or restore an older database"));
  }
  RETURN_IF_ERROR(Configure(db.get()));
  if (options.integrity_check) RETURN_IF_ERROR(QuickCheck(db.get()));
  RETURN_IF_ERROR(Migrate(db.get(), version, migrations));
  *out_db = std::move(db);
  *out_v = latest;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   Options options) {
  DbHandle db;
  int version = 0;
  absl::Status s = OpenImpl(path, options, &db, &version);
  if (!s.ok()) return Annotate(s, absl::StrCat("state database ", path));
  return std::unique_ptr<Store>(new Store(path, std::move(db), version));
}

Store::~Store() {
  absl::MutexLock lock(&mu_);
  statements_.clear();
  db_.reset();
}

absl::StatusOr<Stmt*> Store::CachedLocked(absl::string_view sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    ASSIGN_OR_RETURN(Stmt stmt,
                     Stmt::Prepare(db_.get(), sql, SQLITE_PREPARE_PERSISTENT));
    it = statements_.emplace(std::string(sql), std::move(stmt)).first;
  }
  return &it->second;
}

size_t Store::cached_statements() {
  absl::MutexLock lock(&mu_);
  return statements_.size();
}

absl::StatusOr<std::string> Store::GetMeta(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(
      Stmt stmt,
      Stmt::Prepare(db_.get(), "SELECT value FROM meta WHERE key=?"));
  stmt.Bind(1, key);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("meta key \"", key, "\""));
  return stmt.ColumnText(0);
}

absl::Status Store::SetMeta(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(
      Stmt stmt,
      Stmt::Prepare(db_.get(),
                    "INSERT INTO meta(key, value) VALUES(?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value"));
  stmt.Bind(1, key).Bind(2, value);
  return stmt.Run();
}

absl::Status Store::Checkpoint() {
  absl::MutexLock lock(&mu_);
  int rc = sqlite3_wal_checkpoint_v2(
      db_.get(), nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError("wal checkpoint", db_.get(), rc);
  return absl::OkStatus();
}

}  // namespace mycel::store
