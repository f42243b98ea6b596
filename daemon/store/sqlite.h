// Thin RAII wrappers over the SQLite C API that turn result codes into
// absl::Status. They add no policy; Store decides pragmas and migrations.
#ifndef MYCEL_DAEMON_STORE_SQLITE_H_
#define MYCEL_DAEMON_STORE_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel::store {

struct SqliteCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using DbHandle = std::unique_ptr<sqlite3, SqliteCloser>;

// Builds a Status from the connection's last error: "<what>: <message>
// (<SQLITE_CODE>)". SQLITE_BUSY/LOCKED map to UNAVAILABLE, SQLITE_FULL to
// RESOURCE_EXHAUSTED, SQLITE_CORRUPT/NOTADB to DATA_LOSS, SQLITE_CONSTRAINT
// to ALREADY_EXISTS (unique) or FAILED_PRECONDITION, SQLITE_READONLY and
// SQLITE_PERM/AUTH/CANTOPEN to PERMISSION_DENIED, the rest to INTERNAL.
absl::Status SqliteError(absl::string_view what, sqlite3* db, int rc);

// A prepared statement. Binding indexes start at 1, columns at 0, as in
// SQLite. Not thread-safe: use it under the owning connection's lock.
class Stmt {
 public:
  // `flags` are sqlite3_prepare_v3's (SQLITE_PREPARE_PERSISTENT for a
  // statement that is kept and run many times).
  static absl::StatusOr<Stmt> Prepare(sqlite3* db, absl::string_view sql,
                                      unsigned flags = 0);

  Stmt(Stmt&&) = default;
  Stmt& operator=(Stmt&&) = default;

  Stmt& Bind(int index, int64_t value);
  Stmt& Bind(int index, absl::string_view value);
  Stmt& BindBlob(int index, absl::string_view bytes);
  Stmt& BindNull(int index);

  // Advances to the next row: true when a row is ready, false when done.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows.
  absl::Status Run();
  // Resets so that the statement can be bound and run again.
  void Reset();

  int64_t ColumnInt(int col) const;
  std::string ColumnText(int col) const;
  std::string ColumnBlob(int col) const;
  bool ColumnIsNull(int col) const;

 private:
  Stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}

  sqlite3* db_;
  std::unique_ptr<sqlite3_stmt, StmtFinalizer> stmt_;
  int bind_rc_ = SQLITE_OK;
};

// Runs one or more SQL statements that return no rows.
absl::Status Exec(sqlite3* db, absl::string_view sql);

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_SQLITE_H_
