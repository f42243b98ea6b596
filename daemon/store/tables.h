// Every table of the state database, declared once, each either node-local
// (written only by this node, never shared) or replicated (the mesh's shared
// state: written only through Store::WriteReplicated, which records each
// change in the change log with its origin, sequence and clock). The store
// refuses any other write to a replicated table, and a test checks that
// every table the migrations create is declared here.
#ifndef MYCEL_DAEMON_STORE_TABLES_H_
#define MYCEL_DAEMON_STORE_TABLES_H_

#include <span>

#include "absl/strings/string_view.h"

namespace mycel::store {

enum class Replication {
  kNodeLocal,   // this node's own; written freely
  kReplicated,  // shared by the mesh; written only by WriteReplicated
  kChangeLog,   // the change log; written only by WriteReplicated
};

struct TableInfo {
  absl::string_view name;
  Replication replication;
  absl::string_view what;  // one line, for the schema's readers
};

// The tables of BuiltinMigrations().
std::span<const TableInfo> BuiltinTables();

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_TABLES_H_
