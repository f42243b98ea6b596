#include "daemon/store/query.h"

#include <sqlite3.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/store/sqlite.h"
#include "runtime/status.h"

namespace mycel::store {
namespace {

constexpr size_t kMaxSqlBytes = 64 << 10;

// What a query may read, built from the database. Secrets (join token hashes,
// here and as the changes of mesh.tokens, the mesh row, meta) and protobuf
// blobs stay out.
struct Relation {
  absl::string_view name;
  absl::string_view select;  // its rows, in order
};

constexpr Relation kRelations[] = {
    {"kv",
     "SELECT o.key AS key, CAST(o.value AS TEXT) AS "
     "value, o.origin || ':' || o.seq || '@' || printf('%x', o.hlc) AS "
     "version, o.origin AS origin, o.seq "
     "AS seq, o.hlc AS hlc, c.revision AS revision FROM main.objects o LEFT "
     "JOIN main.kv_changes c ON c.key=o.key WHERE o.namespace='kv' AND "
     "o.value IS NOT NULL ORDER BY o.key"},
    {"nodes",
     "SELECT key AS name, CAST(value AS TEXT) AS "
     "status, origin, seq, hlc FROM main.objects WHERE "
     "namespace='node.status' AND value IS NOT NULL AND instr(key, '/')=0 "
     "ORDER BY key"},
    {"members",
     "SELECT name, CASE state WHEN 1 THEN "
     "'alive' WHEN 2 THEN 'suspect' WHEN 3 THEN 'dead' WHEN 4 THEN 'left' "
     "ELSE 'unknown' END AS state, incarnation, state_since_us, last_heard_us "
     "FROM main.members ORDER BY name"},
    {"cells",
     "SELECT name, created_us, init_pid, ephemeral "
     "FROM main.cells ORDER BY name"},
    {"executables",
     "SELECT cell, name, pid FROM "
     "main.executables ORDER BY cell, name"},
    {"changes",
     "SELECT origin, seq, hlc, tbl, key, "
     "CAST(value AS TEXT) AS value FROM main.change_log WHERE NOT (tbl = "
     "'objects' AND key LIKE 'mesh.tokens/%') ORDER BY hlc, origin"},
};

constexpr absl::string_view kRelationNames[] = {
    "kv", "nodes", "members", "cells", "executables", "changes"};

// Pure functions of their arguments: none touches a file, loads code or
// makes a value bigger than SQLITE_LIMIT_LENGTH.
constexpr absl::string_view kFunctions[] = {
    "->",
    "->>",
    "abs",
    "avg",
    "char",
    "coalesce",
    "count",
    "date",
    "datetime",
    "format",
    "glob",
    "group_concat",
    "hex",
    "ifnull",
    "iif",
    "instr",
    "json",
    "json_array",
    "json_array_length",
    "json_extract",
    "json_group_array",
    "json_group_object",
    "json_object",
    "json_quote",
    "json_type",
    "json_valid",
    "julianday",
    "length",
    "like",
    "likelihood",
    "likely",
    "lower",
    "ltrim",
    "max",
    "min",
    "nullif",
    "printf",
    "quote",
    "replace",
    "round",
    "rtrim",
    "strftime",
    "substr",
    "substring",
    "sum",
    "time",
    "total",
    "trim",
    "typeof",
    "unicode",
    "unixepoch",
    "unlikely",
    "upper",
};

struct Run {
  // Every table and view of the database (lower case).
  absl::flat_hash_set<std::string> tables;
  // The relations the statement names (lower case), noted by the
  // authorizer as it prepares it.
  absl::flat_hash_set<std::string> named;
  absl::Time deadline;
  bool timed_out = false;
  std::string refused;  // why the authorizer said no
};

bool Listed(std::span<const absl::string_view> list, absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (absl::string_view n : list) {
    if (n == lower) return true;
  }
  return false;
}

int AuthorizeQuery(void* arg, int action, const char* a, const char* b,
                   const char* db, const char*) {
  auto* run = static_cast<Run*>(arg);
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_RECURSIVE:
      return SQLITE_OK;
    case SQLITE_READ:
      // Only the temporary relations: a read through a view or a CTE of
      // the same name would report that name as its 4th argument, so the
      // trigger/view name proves nothing and is not used.
      if (a != nullptr && db != nullptr && absl::string_view(db) == "temp" &&
          Listed(kRelationNames, a)) {
        run->named.insert(absl::AsciiStrToLower(a));
        return SQLITE_OK;
      }
      // A read of no column (count(*)) names the table as written, with
      // the schema only when the query wrote one: unqualified, it is a
      // relation, a CTE or a table of the database. Only the last is refused,
      // so a CTE may not take a table's name.
      if (a != nullptr && db == nullptr && b != nullptr && b[0] == '\0') {
        const std::string name = absl::AsciiStrToLower(a);
        if (Listed(kRelationNames, name)) {
          // A CTE of a relation's name lands here too: the relation is
          // then built for nothing, never missed.
          run->named.insert(name);
          return SQLITE_OK;
        }
        if (!run->tables.contains(name) && !absl::StartsWith(name, "sqlite_")) {
          return SQLITE_OK;
        }
      }
      run->refused =
          absl::StrCat("may not read ", db != nullptr ? db : "?", ".",
                       a != nullptr ? a : "?", ": a query reads only ",
                       absl::StrJoin(kRelationNames, ", "));
      return SQLITE_DENY;
    case SQLITE_FUNCTION:
      if (b != nullptr && Listed(kFunctions, b)) return SQLITE_OK;
      run->refused =
          absl::StrCat("function ", b != nullptr ? b : "?", " is not allowed");
      return SQLITE_DENY;
    case SQLITE_PRAGMA:
      run->refused = absl::StrCat("PRAGMA ", a != nullptr ? a : "",
                                  " is not allowed: a query may only SELECT");
      return SQLITE_DENY;
    case SQLITE_ATTACH:
    case SQLITE_DETACH:
      run->refused = "ATTACH and DETACH are not allowed";
      return SQLITE_DENY;
    default:
      run->refused = absl::StrCat(
          "only SELECT is allowed (refused action ", action,
          a != nullptr ? absl::StrCat(" on ", a) : std::string(), ")");
      return SQLITE_DENY;
  }
}

int Progress(void* arg) {
  auto* run = static_cast<Run*>(arg);
  if (absl::Now() < run->deadline) return 0;
  run->timed_out = true;
  return 1;
}

std::string Message(sqlite3* db) { return sqlite3_errmsg(db); }

// The widest field or precision printf() and format() take in a query.
constexpr int64_t kMaxPrintfField = 100000;

// SQLite's printf() writes a %c with precision P by P appends in one step of
// its VM (SQLite 3.40): "printf('%.*c', 2147483647, 'x')" took 21 s of a
// thread past a 2 s limit, since the progress handler runs between steps
// only, and returned NULL. The query connection's printf and format check
// every width and precision against kMaxPrintfField, then format on a
// private in-memory connection, whose printf is SQLite's own.
class PrintfGuard {
 public:
  PrintfGuard() = default;
  PrintfGuard(const PrintfGuard&) = delete;
  PrintfGuard& operator=(const PrintfGuard&) = delete;
  ~PrintfGuard() {
    for (sqlite3_stmt* st : by_argc_) sqlite3_finalize(st);
    if (side_ != nullptr) sqlite3_close(side_);
  }

  // Makes printf and format of `db` go through the guard (which must
  // outlive `db`), with values bounded as `db`'s.
  absl::Status Install(sqlite3* db) {
    max_length_ = sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1);
    for (const char* name : {"printf", "format"}) {
      int rc = sqlite3_create_function_v2(
          db, name, -1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, this, &Call,
          nullptr, nullptr, nullptr);
      if (rc != SQLITE_OK) return SqliteError("install printf", db, rc);
    }
    return absl::OkStatus();
  }

 private:
  static void Call(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
    static_cast<PrintfGuard*>(sqlite3_user_data(ctx))->Format(ctx, argc, argv);
  }

  // Why the format of argv[0] may not run ("" when it may).
  static std::string Check(int argc, sqlite3_value** argv) {
    const unsigned char* f = sqlite3_value_text(argv[0]);
    if (f == nullptr) return "";
    int next = 1;  // the next argument a conversion or a '*' takes
    auto over = [](int64_t n) {
      return n > kMaxPrintfField || n < -kMaxPrintfField;
    };
    for (const unsigned char* p = f; *p != '\0'; ++p) {
      if (*p != '%') continue;
      ++p;
      if (*p == '%') continue;
      while (*p != '\0' && absl::string_view("-+ #!0,").find(static_cast<char>(
                               *p)) != absl::string_view::npos) {
        ++p;
      }
      // The width, then the precision: digits or '*' each.
      for (int part = 0; part < 2; ++part) {
        if (part == 1) {
          if (*p != '.') break;
          ++p;
        }
        int64_t n = 0;
        if (*p == '*') {
          ++p;
          if (next < argc) n = sqlite3_value_int64(argv[next]);
          ++next;
        } else {
          while (*p >= '0' && *p <= '9') {
            if (n <= kMaxPrintfField) n = n * 10 + (*p - '0');
            ++p;
          }
        }
        if (over(n)) {
          return absl::StrCat("printf: a ", part == 0 ? "width" : "precision",
                              " of ", n, " is over the limit of ",
                              kMaxPrintfField);
        }
      }
      while (*p == 'l') ++p;
      if (*p == '\0') break;
      ++next;  // the conversion's own argument
    }
    return "";
  }

  void Format(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
    if (argc == 0) {
      sqlite3_result_null(ctx);
      return;
    }
    if (std::string why = Check(argc, argv); !why.empty()) {
      sqlite3_result_error(ctx, why.c_str(), -1);
      return;
    }
    absl::StatusOr<sqlite3_stmt*> st = Statement(argc);
    if (!st.ok()) {
      sqlite3_result_error(ctx, std::string(st.status().message()).c_str(), -1);
      return;
    }
    for (int i = 0; i < argc; ++i) sqlite3_bind_value(*st, i + 1, argv[i]);
    int rc = sqlite3_step(*st);
    if (rc == SQLITE_ROW) {
      sqlite3_result_value(ctx, sqlite3_column_value(*st, 0));
    } else {
      sqlite3_result_error(ctx, sqlite3_errmsg(side_), -1);
    }
    sqlite3_reset(*st);
    sqlite3_clear_bindings(*st);
  }

  // "SELECT printf(?1, ..., ?argc)" on the private connection, made once.
  absl::StatusOr<sqlite3_stmt*> Statement(int argc) {
    if (side_ == nullptr) {
      int rc =
          sqlite3_open_v2(":memory:", &side_,
                          SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
      if (rc != SQLITE_OK) return SqliteError("printf", side_, rc);
      sqlite3_limit(side_, SQLITE_LIMIT_LENGTH, max_length_);
    }
    if (static_cast<int>(by_argc_.size()) <= argc) {
      by_argc_.resize(argc + 1, nullptr);
    }
    if (by_argc_[argc] == nullptr) {
      std::string sql = "SELECT printf(";
      for (int i = 1; i <= argc; ++i) {
        absl::StrAppend(&sql, i > 1 ? ", ?" : "?", i);
      }
      sql += ")";
      int rc =
          sqlite3_prepare_v2(side_, sql.c_str(), -1, &by_argc_[argc], nullptr);
      if (rc != SQLITE_OK) return SqliteError("printf", side_, rc);
    }
    return by_argc_[argc];
  }

  sqlite3* side_ = nullptr;
  std::vector<sqlite3_stmt*> by_argc_;
  int max_length_ = 0;
};

absl::Status StepError(sqlite3* db, int rc, const Run& run,
                       const QueryLimits& limits) {
  if (run.timed_out || (rc & 0xff) == SQLITE_INTERRUPT) {
    return absl::DeadlineExceededError(
        absl::StrCat("query ran past its time limit of ",
                     absl::FormatDuration(limits.timeout)));
  }
  if ((rc & 0xff) == SQLITE_NOMEM || (rc & 0xff) == SQLITE_TOOBIG) {
    return absl::ResourceExhaustedError(
        absl::StrCat("query: ", Message(db), " (values are limited to ",
                     sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1), " bytes)"));
  }
  // A refused function is SQLITE_ERROR, a refused action SQLITE_AUTH.
  if (!run.refused.empty()) {
    return absl::PermissionDeniedError(absl::StrCat("query: ", run.refused));
  }
  return absl::InvalidArgumentError(absl::StrCat("sql: ", Message(db)));
}

// Opens the database for a query and begins the read transaction that
// every relation is built in (one snapshot: the same commit for all), with
// the relations created empty, so that preparing the query against them
// tells which it reads.
absl::StatusOr<DbHandle> OpenSnapshot(Store* store) {
  // A connection of its own to the database file, read-only: in WAL mode
  // it reads the last commit while the daemon's connection goes on
  // writing, so a query holds no lock of the store's and copies only the
  // relations it reads, not the database.
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(store->path().c_str(), &raw,
                           SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  DbHandle db(raw);
  if (rc != SQLITE_OK) {
    return SqliteError("open the database for a query", raw, rc);
  }
  sqlite3_extended_result_codes(db.get(), 1);
  // A reader waits only while the WAL's index is rebuilt.
  sqlite3_busy_timeout(db.get(), 1000);
  // Hardening beyond the authorizer, before any SQL of the caller's is
  // prepared: no extension loading, no writes to the schema, nothing
  // attached, bounded statement text.
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0,
                    nullptr);
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite3_limit(db.get(), SQLITE_LIMIT_ATTACHED, 0);
  sqlite3_limit(db.get(), SQLITE_LIMIT_SQL_LENGTH, kMaxSqlBytes);
  RETURN_IF_ERROR(Exec(db.get(), "BEGIN"));
  for (const Relation& r : kRelations) {
    // LIMIT 0 reads no row; the columns and their affinities are those of
    // the full relation.
    absl::Status s = Exec(db.get(), absl::StrCat("CREATE TABLE temp.", r.name,
                                                 " AS ", r.select, " LIMIT 0"));
    if (!s.ok()) {
      Exec(db.get(), "ROLLBACK").IgnoreError();
      return Annotate(s, absl::StrCat("create relation ", r.name));
    }
  }
  return db;
}

// Fills the relations the query named (run.named) from the snapshot, ends
// the read transaction (the checkpointer may then copy past it), and leaves
// the connection able only to read. The time limit counts from before the
// build: a query over a large relation is bounded as a whole.
absl::Status FillRelations(sqlite3* db, Run& run, const QueryLimits& limits,
                           std::vector<std::string>* built) {
  sqlite3_progress_handler(db, 1000, Progress, &run);
  for (const Relation& r : kRelations) {
    if (!run.named.contains(r.name)) continue;
    absl::Status s =
        Exec(db, absl::StrCat("INSERT INTO temp.", r.name, " ", r.select));
    if (!s.ok()) {
      Exec(db, "ROLLBACK").IgnoreError();
      if (run.timed_out) {
        return absl::DeadlineExceededError(absl::StrCat(
            "query ran past its time limit of ",
            absl::FormatDuration(limits.timeout), " (reading ", r.name, ")"));
      }
      return Annotate(s, absl::StrCat("build relation ", r.name));
    }
    built->push_back(std::string(r.name));
  }
  RETURN_IF_ERROR(Exec(db, "COMMIT"));
  sqlite3_limit(db, SQLITE_LIMIT_LENGTH,
                static_cast<int>(std::min<size_t>(limits.max_bytes, 1 << 30)));
  return Exec(db, "PRAGMA query_only=1");
}

using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// Prepares `sql`, the one SELECT of a query, under the authorizer set on
// `db`.
absl::StatusOr<StmtPtr> PrepareQuery(sqlite3* db, absl::string_view sql,
                                     const Run& run,
                                     const QueryLimits& limits) {
  const char* tail = nullptr;
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()),
                              &raw, &tail);
  StmtPtr stmt(raw);
  if (rc != SQLITE_OK) return StepError(db, rc, run, limits);
  if (stmt == nullptr) {
    return absl::InvalidArgumentError("sql: holds no statement");
  }
  // Whatever follows the statement must be blank or comments: preparing
  // it yields no statement then.
  const size_t used = static_cast<size_t>(tail - sql.data());
  if (used < sql.size()) {
    sqlite3_stmt* next = nullptr;
    int rc2 = sqlite3_prepare_v2(db, tail, static_cast<int>(sql.size() - used),
                                 &next, nullptr);
    StmtPtr second(next);
    if (rc2 != SQLITE_OK || second != nullptr) {
      return absl::InvalidArgumentError(
          "sql: holds more than one statement; a query is one SELECT");
    }
  }
  if (!sqlite3_stmt_readonly(stmt.get())) {
    return absl::PermissionDeniedError(
        "query: only SELECT is allowed; this statement writes");
  }
  if (sqlite3_column_count(stmt.get()) == 0) {
    return absl::InvalidArgumentError("sql: not a query (it returns no rows)");
  }
  return stmt;
}

QueryValue ReadValue(sqlite3_stmt* st, int col, size_t* bytes) {
  QueryValue v;
  switch (sqlite3_column_type(st, col)) {
    case SQLITE_INTEGER:
      v.type = QueryValue::Type::kInteger;
      v.integer = sqlite3_column_int64(st, col);
      *bytes += 8;
      break;
    case SQLITE_FLOAT:
      v.type = QueryValue::Type::kReal;
      v.real = sqlite3_column_double(st, col);
      *bytes += 8;
      break;
    case SQLITE_TEXT: {
      v.type = QueryValue::Type::kText;
      const auto* p = sqlite3_column_text(st, col);
      v.bytes.assign(reinterpret_cast<const char*>(p),
                     sqlite3_column_bytes(st, col));
      *bytes += v.bytes.size();
      break;
    }
    case SQLITE_BLOB: {
      v.type = QueryValue::Type::kBlob;
      const void* p = sqlite3_column_blob(st, col);
      v.bytes.assign(static_cast<const char*>(p),
                     sqlite3_column_bytes(st, col));
      *bytes += v.bytes.size();
      break;
    }
    default:
      break;
  }
  return v;
}

}  // namespace

std::span<const absl::string_view> QueryRelations() { return kRelationNames; }

absl::StatusOr<QueryResult> RunQuery(Store* store, absl::string_view sql,
                                     const QueryLimits& limits) {
  if (absl::StripAsciiWhitespace(sql).empty()) {
    return absl::InvalidArgumentError("sql: empty");
  }
  if (sql.size() > kMaxSqlBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sql: ", sql.size(), " bytes is over the limit of ", kMaxSqlBytes));
  }
  // SQLite reads a statement up to its first NUL byte: what follows one
  // would be neither run nor checked.
  if (const size_t nul = sql.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("sql: a NUL byte at byte ", nul));
  }
  Run run;
  run.deadline = absl::Now() + limits.timeout;
  PrintfGuard printf_guard;  // outlives db
  ASSIGN_OR_RETURN(DbHandle db, OpenSnapshot(store));
  {
    ASSIGN_OR_RETURN(Stmt names,
                     Stmt::Prepare(db.get(),
                                   "SELECT lower(name) FROM main.sqlite_schema "
                                   "WHERE type IN ('table', 'view')"));
    for (;;) {
      ASSIGN_OR_RETURN(bool row, names.Step());
      if (!row) break;
      run.tables.insert(names.ColumnText(0));
    }
  }
  // First against the empty relations: the authorizer refuses what the
  // query may not do before anything is built, and notes the relations it
  // reads, the only ones built.
  sqlite3_set_authorizer(db.get(), AuthorizeQuery, &run);
  RETURN_IF_ERROR(PrepareQuery(db.get(), sql, run, limits).status());
  sqlite3_set_authorizer(db.get(), nullptr, nullptr);
  QueryResult result;
  RETURN_IF_ERROR(FillRelations(db.get(), run, limits, &result.relations));
  // After the build, whose kv relation formats with SQLite's own printf.
  RETURN_IF_ERROR(printf_guard.Install(db.get()));
  sqlite3_set_authorizer(db.get(), AuthorizeQuery, &run);
  ASSIGN_OR_RETURN(StmtPtr stmt, PrepareQuery(db.get(), sql, run, limits));
  const int columns = sqlite3_column_count(stmt.get());
  for (int i = 0; i < columns; ++i) {
    const char* name = sqlite3_column_name(stmt.get(), i);
    result.columns.push_back(name != nullptr ? name : "");
  }
  size_t bytes = 0;
  for (;;) {
    int rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return StepError(db.get(), rc, run, limits);
    if (static_cast<int64_t>(result.rows.size()) >= limits.max_rows ||
        bytes >= limits.max_bytes) {
      result.truncated = true;
      break;
    }
    std::vector<QueryValue> row;
    row.reserve(columns);
    for (int i = 0; i < columns; ++i) {
      row.push_back(ReadValue(stmt.get(), i, &bytes));
    }
    result.rows.push_back(std::move(row));
  }
  return result;
}

}  // namespace mycel::store
