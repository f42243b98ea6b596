#include "daemon/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel::store {
namespace {

// The database and its WAL: the daemon's alone.
constexpr mode_t kDatabaseMode = 0600;

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
  // Never SQLITE_OPEN_CREATE: an existing file that is not a database,
  // empty ones included, must be refused rather than taken as a new one
  // (see Store::Open, which creates new databases).
  int rc = sqlite3_open_v2(
      path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
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

// Makes a new database at `path`, which does not exist: built and migrated
// under a temporary name, then renamed into place, so that `path` never
// names a file that is not a whole database, even after a crash in the
// middle. The file is private to the daemon (0600): it holds executables'
// environments, which carry secrets.
absl::Status CreateDatabase(const std::string& path,
                            const Store::Options& options) {
  const std::string tmp = path + ".new";
  // Left by a crash during an earlier creation; the caller holds the state
  // directory's lock, so no one else is making it.
  if (unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    return PosixError(absl::StrCat("remove ", tmp), errno);
  }
  {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                     kDatabaseMode));
    if (!fd) return PosixError(absl::StrCat("create ", tmp), errno);
  }
  {
    DbHandle db;
    int version = 0;
    absl::Status s = OpenImpl(tmp, options, &db, &version);
    if (!s.ok()) {
      unlink(tmp.c_str());
      return s;
    }
    // Closing the last connection checkpoints the WAL into the file and
    // removes it.
  }
  RETURN_IF_ERROR(SyncPath(tmp));
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return PosixError(absl::StrCat("rename ", tmp, " to ", path), errno);
  }
  size_t slash = path.rfind('/');
  return SyncPath(slash == std::string::npos ? "."
                  : slash == 0               ? "/"
                                             : path.substr(0, slash));
}

// Clears group and other bits of the database and the files SQLite keeps
// beside it (which it creates with the database's mode), logging each one
// it had to change.
absl::Status TightenDatabaseFiles(const std::string& path) {
  for (const std::string& p : {path, path + "-wal", path + "-shm"}) {
    absl::StatusOr<bool> changed = TightenMode(p, kDatabaseMode);
    if (absl::IsNotFound(changed.status())) continue;
    RETURN_IF_ERROR(changed.status());
    if (*changed) {
      log::Warn("state database file was readable by others; now 0600",
                {{"path", p}});
    }
  }
  return absl::OkStatus();
}

absl::Status PrepareFile(const std::string& path,
                         const Store::Options& options) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return PosixError(absl::StrCat("stat ", path), errno);
    return CreateDatabase(path, options);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        "is not a regular file; refusing to use it");
  }
  if (st.st_size == 0) {
    return absl::DataLossError(
        "is empty (0 bytes), so whatever it held is gone; myceld creates a "
        "database only where there is no file. Restore it from a backup, or "
        "remove it to start with no state (cells that ran are forgotten, "
        "and their cgroups and processes are left behind)");
  }
  return TightenDatabaseFiles(path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   Options options) {
  DbHandle db;
  int version = 0;
  absl::Status s = PrepareFile(path, options);
  if (s.ok()) s = OpenImpl(path, options, &db, &version);
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

absl::Status Store::RecordBoot(absl::Time started, absl::string_view version,
                               int64_t pid) {
  return WithStatement(
      "INSERT INTO boots(started_at, version, pid) VALUES(?, ?, ?)",
      [&](Stmt& st) {
        return st.Bind(1, absl::ToUnixSeconds(started))
            .Bind(2, version)
            .Bind(3, pid)
            .Run();
      });
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
