// The schema, as a sequence of forward migrations. Never edit a migration
// that has shipped; add a new one.
#include "daemon/store/store.h"

namespace mycel::store {
namespace {

constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) STRICT;
-- One row per daemon start, newest last: when, which version, which pid.
CREATE TABLE boots (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  started_at INTEGER NOT NULL,          -- unix seconds
  version    TEXT NOT NULL,
  pid        INTEGER NOT NULL
) STRICT;
)sql"},
};

}  // namespace

std::span<const Migration> BuiltinMigrations() { return kMigrations; }

}  // namespace mycel::store
