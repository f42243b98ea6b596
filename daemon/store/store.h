// Store: myceld's SQLite state database.
//
// One file, <state-dir>/mycel.db, in WAL mode with a busy timeout and
// foreign keys on. The schema is versioned with PRAGMA user_version and
// migrated forward at open, one transaction per migration. A database whose
// version is newer than this binary knows is refused rather than touched.
#ifndef MYCEL_DAEMON_STORE_STORE_H_
#define MYCEL_DAEMON_STORE_STORE_H_

#include <map>
#include <memory>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/sqlite.h"

namespace mycel::store {

// One forward migration. `version` is the schema version after it runs;
// versions are consecutive from 1.
struct Migration {
  int version;
  absl::string_view sql;
};

// The migrations this binary ships, in order.
std::span<const Migration> BuiltinMigrations();

// Thread-safe: every access to the connection happens under mu(), which
// callers take through Locked().
class Store {
 public:
  struct Options {
    // Migrations to apply; empty means BuiltinMigrations().
    std::span<const Migration> migrations;
    // Run PRAGMA quick_check at open and refuse a damaged database.
    bool integrity_check = true;
  };

  // Opens the database at `path` and migrates it. Only where no file
  // exists is a new database made (whole, under a temporary name, then
  // renamed into place); an existing file that is empty or not a database
  // is refused and left as it is. The database and the files beside it
  // are made private (0600) when they are not, with a log line.
  // Errors name the path and what went wrong:
  //  - FAILED_PRECONDITION when the schema is newer than the binary knows
  //    ("schema version 7 is newer than this myceld supports (3)"), or the
  //    path is not a regular file;
  //  - DATA_LOSS when the file is empty, is not a database or fails its
  //    check;
  //  - PERMISSION_DENIED when it cannot be opened or written.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                                     Options options);
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path) {
    return Open(path, Options{});
  }

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  const std::string& path() const { return path_; }
  int schema_version() const { return schema_version_; }

  // Runs `fn(sqlite3*)` with the connection locked and returns its result.
  template <typename Fn>
  auto Locked(Fn&& fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return fn(db_.get());
  }

  // Runs `fn(sqlite3*)` inside BEGIN IMMEDIATE ... COMMIT; rolls back when
  // it returns an error. `fn` returns absl::Status.
  template <typename Fn>
  absl::Status Transaction(Fn&& fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    absl::Status s = Exec(db_.get(), "BEGIN IMMEDIATE");
    if (!s.ok()) return s;
    s = fn(db_.get());
    if (!s.ok()) {
      Exec(db_.get(), "ROLLBACK").IgnoreError();  // The error above wins.
      return s;
    }
    return Exec(db_.get(), "COMMIT");
  }

  // Runs `fn(Stmt&)` with `sql` prepared once for this connection and kept:
  // a statement that runs on every request then skips SQLite's parser and
  // code generator, about two thirds of the cost of a small write. The
  // statement is reset, and its bindings cleared, after `fn`. `sql` must be
  // a fixed text, never one built from data: the cache keeps one statement
  // per distinct text, for the life of the store. `fn` returns absl::Status.
  // Not from inside Locked or Transaction: the lock is not reentrant.
  template <typename Fn>
  absl::Status WithStatement(absl::string_view sql, Fn&& fn)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Stmt*> stmt = CachedLocked(sql);
    if (!stmt.ok()) return stmt.status();
    absl::Status s = fn(**stmt);
    (*stmt)->Reset();
    return s;
  }

  // How many statements the cache holds (for tests).
  size_t cached_statements() ABSL_LOCKS_EXCLUDED(mu_);

  // Records a start of the daemon (table boots): when, which version, pid.
  absl::Status RecordBoot(absl::Time started, absl::string_view version,
                          int64_t pid);

  // Key/value metadata (table meta).
  absl::StatusOr<std::string> GetMeta(absl::string_view key);
  absl::Status SetMeta(absl::string_view key, absl::string_view value);

  // Copies the WAL into the main file and truncates it (used before a
  // shutdown so that the database is a single consistent file).
  absl::Status Checkpoint();

 private:
  Store(std::string path, DbHandle db, int version)
      : path_(std::move(path)), db_(std::move(db)), schema_version_(version) {}

  absl::StatusOr<Stmt*> CachedLocked(absl::string_view sql)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  DbHandle db_ ABSL_GUARDED_BY(mu_);
  // Statements of WithStatement, by text. Finalized before db_ closes.
  std::map<std::string, Stmt, std::less<>> statements_ ABSL_GUARDED_BY(mu_);
  const int schema_version_;
};

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_STORE_H_
