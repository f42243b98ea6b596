#include "daemon/store/sqlite.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mycel::store {

absl::Status SqliteError(absl::string_view what, sqlite3* db, int rc) {
  int primary = rc & 0xff;
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (primary) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      code = absl::StatusCode::kUnavailable;
      break;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      code = absl::StatusCode::kDataLoss;
      break;
    case SQLITE_CONSTRAINT:
      code =
          rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY
              ? absl::StatusCode::kAlreadyExists
              : absl::StatusCode::kFailedPrecondition;
      break;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
    case SQLITE_CANTOPEN:
      code = absl::StatusCode::kPermissionDenied;
      break;
    default:
      break;
  }
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return absl::Status(
      code, absl::StrCat(what, ": ", msg, " (", sqlite3_errstr(rc), ", code ",
                         rc, ")"));
}

absl::StatusOr<Stmt> Stmt::Prepare(sqlite3* db, absl::string_view sql,
                                   unsigned flags) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                              flags, &raw, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(raw);
    return SqliteError(absl::StrCat("prepare \"", sql, "\""), db, rc);
  }
  return Stmt(db, raw);
}

Stmt& Stmt::Bind(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_.get(), index, value);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Stmt& Stmt::Bind(int index, absl::string_view value) {
  int rc = sqlite3_bind_text(stmt_.get(), index, value.data(),
                             static_cast<int>(value.size()), SQLITE_TRANSIENT);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Stmt& Stmt::BindBlob(int index, absl::string_view bytes) {
  int rc = sqlite3_bind_blob(stmt_.get(), index, bytes.data(),
                             static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Stmt& Stmt::BindNull(int index) {
  int rc = sqlite3_bind_null(stmt_.get(), index);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

absl::StatusOr<bool> Stmt::Step() {
  if (bind_rc_ != SQLITE_OK) {
    return SqliteError(absl::StrCat("bind \"", sqlite3_sql(stmt_.get()), "\""),
                       db_, bind_rc_);
  }
  int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(absl::StrCat("step \"", sqlite3_sql(stmt_.get()), "\""),
                     db_, rc);
}

absl::Status Stmt::Run() {
  absl::StatusOr<bool> row = Step();
  if (!row.ok()) return row.status();
  return absl::OkStatus();
}

void Stmt::Reset() {
  sqlite3_reset(stmt_.get());
  sqlite3_clear_bindings(stmt_.get());
  bind_rc_ = SQLITE_OK;
}

int64_t Stmt::ColumnInt(int col) const {
  return sqlite3_column_int64(stmt_.get(), col);
}

std::string Stmt::ColumnText(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_.get(), col);
  int n = sqlite3_column_bytes(stmt_.get(), col);
  return p == nullptr ? std::string()
                      : std::string(reinterpret_cast<const char*>(p), n);
}

std::string Stmt::ColumnBlob(int col) const {
  const void* p = sqlite3_column_blob(stmt_.get(), col);
  int n = sqlite3_column_bytes(stmt_.get(), col);
  return p == nullptr ? std::string()
                      : std::string(static_cast<const char*>(p), n);
}

bool Stmt::ColumnIsNull(int col) const {
  return sqlite3_column_type(stmt_.get(), col) == SQLITE_NULL;
}

absl::Status Exec(sqlite3* db, absl::string_view sql) {
  std::string copy(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db, copy.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(absl::StrCat("exec \"", sql, "\""), db, rc);
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

}  // namespace mycel::store
