// RunQuery: read-only SQL over the local replica, for Query.Run and
// `mycel query`.
//
// A query never touches the daemon's connection: it opens the database
// file read-only on a connection of its own and, in one read transaction
// (WAL: a snapshot of the last commit, while the daemon goes on writing),
// builds the relations a query may read (kv, nodes, members, cells,
// executables, changes; QueryRelations) as temporary tables. The query
// then runs on those alone, so a slow or hostile query can neither block
// the writer nor change the database, and copies only what it may read.
//
// SQLite's authorizer then admits a single SELECT that reads only those
// relations and calls only functions of an allow-list: no other table (the
// join tokens and mesh rows are unreachable), no PRAGMA, ATTACH,
// write, transaction or table-valued function. A progress handler stops it
// at its time limit; the rows it returns stop at a row and a byte limit
// (the result says it was truncated).
//
// Thread-safe: each call has its own connection.
#ifndef MYCEL_DAEMON_STORE_QUERY_H_
#define MYCEL_DAEMON_STORE_QUERY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"

namespace mycel::store {

struct QueryLimits {
  absl::Duration timeout = absl::Seconds(2);
  int64_t max_rows = 10000;
  // Of the values returned, in all.
  size_t max_bytes = 16 << 20;
};

struct QueryValue {
  enum class Type { kNull, kInteger, kReal, kText, kBlob };
  Type type = Type::kNull;
  int64_t integer = 0;
  double real = 0;
  std::string bytes;  // kText and kBlob
};

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<QueryValue>> rows;
  // The query had more rows than the limits let through.
  bool truncated = false;
  // The relations built for it, those the query names (in
  // QueryRelations() order): the others cost it nothing.
  std::vector<std::string> relations;
};

// The relations a query may read.
std::span<const absl::string_view> QueryRelations();

// Runs `sql` on a snapshot of `store`. Errors, after which nothing changed:
//  - INVALID_ARGUMENT: empty, too long, more than one statement, or not
//    valid SQL (SQLite's message, naming field sql);
//  - PERMISSION_DENIED: it writes, or reads or calls what it may not
//    (naming the table, function or action refused);
//  - DEADLINE_EXCEEDED: it ran past `limits.timeout`;
//  - RESOURCE_EXHAUSTED: SQLite ran out of memory or a value was too big.
absl::StatusOr<QueryResult> RunQuery(Store* store, absl::string_view sql,
                                     const QueryLimits& limits);

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_QUERY_H_
