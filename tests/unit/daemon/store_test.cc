#include "daemon/store/store.h"

#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel::store {
namespace {

constexpr Migration kTwo[] = {
    {1, "CREATE TABLE a (x INTEGER PRIMARY KEY) STRICT;"},
    {2, "CREATE TABLE b (y INTEGER REFERENCES a(x)) STRICT;"},
};
constexpr Migration kOne[] = {kTwo[0]};
constexpr Migration kBroken[] = {
    kTwo[0],
    {2, "CREATE TABLE c (z INTEGER); THIS IS NOT SQL;"},
};

int64_t QueryInt(Store& store, const char* sql) {
  return store.Locked([&](sqlite3* db) -> int64_t {
    auto stmt = Stmt::Prepare(db, sql);
    REQUIRE(stmt.ok());
    auto row = stmt->Step();
    REQUIRE(row.ok());
    REQUIRE(*row);
    return stmt->ColumnInt(0);
  });
}

std::string QueryText(Store& store, const char* sql) {
  return store.Locked([&](sqlite3* db) -> std::string {
    auto stmt = Stmt::Prepare(db, sql);
    REQUIRE(stmt.ok());
    auto row = stmt->Step();
    REQUIRE(row.ok());
    REQUIRE(*row);
    return stmt->ColumnText(0);
  });
}

TEST_CASE(
    "a new database gets every built-in migration, WAL and foreign keys") {
  testing::TempDir dir;
  auto store = Store::Open(dir.Sub("mycel.db"));
  REQUIRE(store.ok());
  CHECK((*store)->schema_version() == BuiltinMigrations().back().version);
  CHECK(QueryInt(**store, "PRAGMA user_version") ==
        BuiltinMigrations().back().version);
  CHECK(QueryText(**store, "PRAGMA journal_mode") == "wal");
  CHECK(QueryInt(**store, "PRAGMA foreign_keys") == 1);
  CHECK(QueryInt(**store, "PRAGMA busy_timeout") == 5000);
}

TEST_CASE("migrations run forward from the stored version, once each") {
  testing::TempDir dir;
  std::string path = dir.Sub("m.db");
  {
    auto s = Store::Open(path, {.migrations = kOne});
    REQUIRE(s.ok());
    CHECK((*s)->schema_version() == 1);
    REQUIRE((*s)->Locked([](sqlite3* db) {
                  return Exec(db, "INSERT INTO a VALUES (7)");
                })
                .ok());
  }
  auto s = Store::Open(path, {.migrations = kTwo});
  REQUIRE(s.ok());
  CHECK((*s)->schema_version() == 2);
  CHECK(QueryInt(**s, "SELECT x FROM a") == 7);  // data survived
  // Foreign keys are enforced by the migrated schema.
  absl::Status fk = (*s)->Locked(
      [](sqlite3* db) { return Exec(db, "INSERT INTO b VALUES (99)"); });
  CHECK_MESSAGE(fk.code() == absl::StatusCode::kFailedPrecondition,
                fk.ToString());
  // Opening again applies nothing new.
  s->reset();
  CHECK(Store::Open(path, {.migrations = kTwo}).ok());
}

TEST_CASE("a schema newer than the binary is refused, naming both versions") {
  testing::TempDir dir;
  std::string path = dir.Sub("new.db");
  REQUIRE(Store::Open(path, {.migrations = kTwo}).ok());
  auto s = Store::Open(path, {.migrations = kOne});
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s.status().message() ==
        "state database " + path +
            ": schema version 2 is newer than this myceld supports (1); run a "
            "newer myceld or restore an older database");
}

TEST_CASE("a failed migration rolls back and leaves the version alone") {
  testing::TempDir dir;
  std::string path = dir.Sub("b.db");
  auto s = Store::Open(path, {.migrations = kBroken});
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("migration to schema version 2") !=
        absl::string_view::npos);
  auto again = Store::Open(path, {.migrations = kOne});
  REQUIRE(again.ok());
  CHECK(QueryInt(**again, "PRAGMA user_version") == 1);
  CHECK(QueryInt(**again,
                 "SELECT count(*) FROM sqlite_schema WHERE name='c'") == 0);
}

TEST_CASE("a file that is not a database is DATA_LOSS, not a crash") {
  testing::TempDir dir;
  std::string path = dir.Sub("garbage.db");
  std::string junk(8192, 'x');
  REQUIRE(WriteFile(path, junk).ok());
  auto s = Store::Open(path);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kDataLoss);
  CHECK(s.status().message().find(path) != absl::string_view::npos);
  CHECK(s.status().message().find("not a database") != absl::string_view::npos);
  CHECK(*ReadFile(path) == junk);  // and it was not touched
}

TEST_CASE("an empty file is refused, not taken as a new database") {
  // A 0-byte mycel.db once made myceld start with no cells and forget the
  // ones it ran (their cgroups were left behind).
  testing::TempDir dir;
  std::string path = dir.Sub("mycel.db");
  REQUIRE(WriteFile(path, "").ok());
  auto s = Store::Open(path);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kDataLoss);
  CHECK(s.status().message().find(path) != absl::string_view::npos);
  CHECK(s.status().message().find("empty") != absl::string_view::npos);
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(st.st_size == 0);  // left as it was
  // A directory in its place is refused too.
  REQUIRE(unlink(path.c_str()) == 0);
  REQUIRE(MakeDirs(path, 0700).ok());
  CHECK(Store::Open(path).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a new database is private, whole, and never left half-made") {
  testing::TempDir dir;
  std::string path = dir.Sub("mycel.db");
  // What a crash in the middle of an earlier creation leaves.
  REQUIRE(WriteFile(path + ".new", "half").ok());
  {
    auto s = Store::Open(path);
    REQUIRE(s.ok());
  }
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_size > 0);
  CHECK(access((path + ".new").c_str(), F_OK) != 0);
  // An existing database and its WAL are tightened at open.
  REQUIRE(chmod(path.c_str(), 0644) == 0);
  {
    auto s = Store::Open(path);
    REQUIRE(s.ok());
    REQUIRE((*s)->SetMeta("k", "v").ok());  // the WAL exists now
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    REQUIRE(stat((path + "-wal").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    REQUIRE(chmod((path + "-wal").c_str(), 0666) == 0);
  }
  // Closing checkpoints and removes the WAL; a WAL left by a crash (here,
  // written back by hand) is tightened as well.
  REQUIRE(WriteFile(path + "-wal", "", 0666).ok());
  REQUIRE(chmod((path + "-wal").c_str(), 0666) == 0);
  auto again = Store::Open(path);
  REQUIRE(again.ok());
  REQUIRE(stat((path + "-wal").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(*(*again)->GetMeta("k") == "v");
}

TEST_CASE("a database with a damaged page fails its integrity check") {
  testing::TempDir dir;
  std::string path = dir.Sub("torn.db");
  {
    auto s = Store::Open(path, {.migrations = kOne});
    REQUIRE(s.ok());
    REQUIRE((*s)->Locked([](sqlite3* db) {
                  return Exec(db,
                              "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL "
                              "SELECT i+1 FROM n WHERE i<3000) "
                              "INSERT INTO a SELECT i FROM n;");
                })
                .ok());
    REQUIRE((*s)->Checkpoint().ok());
  }
  // Overwrite the middle of the b-tree of table a (page 3 onwards).
  auto bytes = ReadFile(path);
  REQUIRE(bytes.ok());
  REQUIRE(bytes->size() > 4096 * 3);
  std::string damaged = *bytes;
  for (size_t i = 4096 * 2; i < 4096 * 3; ++i) damaged[i] = '\x5a';
  REQUIRE(WriteFile(path, damaged).ok());
  auto s = Store::Open(path, {.migrations = kOne});
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("a read-only state directory gives a clear error") {
  if (geteuid() != 0) {
    MESSAGE("skipped: mounting a read-only tmpfs needs root");
    return;
  }
  testing::TempDir dir;
  std::string ro = dir.Sub("ro");
  REQUIRE(MakeDirs(ro, 0755).ok());
  REQUIRE(mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, nullptr) == 0);
  auto s = Store::Open(ro + "/mycel.db");
  umount(ro.c_str());
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(s.status().message().find(ro + "/mycel.db") != absl::string_view::npos);
}

TEST_CASE("meta values round-trip and a missing key is NOT_FOUND") {
  testing::TempDir dir;
  auto s = Store::Open(dir.Sub("meta.db"));
  REQUIRE(s.ok());
  REQUIRE((*s)->SetMeta("node_id", "abc").ok());
  REQUIRE((*s)->SetMeta("node_id", "def").ok());
  CHECK(*(*s)->GetMeta("node_id") == "def");
  CHECK((*s)->GetMeta("nope").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("a transaction that fails leaves no trace") {
  testing::TempDir dir;
  auto s = Store::Open(dir.Sub("tx.db"), {.migrations = kOne});
  REQUIRE(s.ok());
  absl::Status st = (*s)->Transaction([](sqlite3* db) -> absl::Status {
    absl::Status ins = Exec(db, "INSERT INTO a VALUES (1)");
    if (!ins.ok()) return ins;
    return absl::AbortedError("changed my mind");
  });
  CHECK(st.code() == absl::StatusCode::kAborted);
  CHECK(QueryInt(**s, "SELECT count(*) FROM a") == 0);
}

TEST_CASE("a kept statement is prepared once and runs with fresh bindings") {
  testing::TempDir dir;
  auto s = Store::Open(dir.Sub("cached.db"), {.migrations = kTwo});
  REQUIRE(s.ok());
  Store& store = **s;
  constexpr char kInsert[] = "INSERT INTO a(x) VALUES(?)";
  for (int64_t x : {1, 2, 3}) {
    CHECK(store
              .WithStatement(kInsert,
                             [&](Stmt& st) { return st.Bind(1, x).Run(); })
              .ok());
  }
  CHECK(store.cached_statements() == 1);
  CHECK(QueryInt(store, "SELECT sum(x) FROM a") == 6);

  // A run that fails (x is the primary key) returns its error and leaves
  // the statement reset and usable.
  absl::Status dup = store.WithStatement(
      kInsert, [](Stmt& st) { return st.Bind(1, int64_t{2}).Run(); });
  CHECK(dup.code() == absl::StatusCode::kAlreadyExists);
  CHECK(store
            .WithStatement(
                kInsert, [](Stmt& st) { return st.Bind(1, int64_t{4}).Run(); })
            .ok());
  // Bindings do not carry over: an unbound parameter is NULL, which the
  // STRICT INTEGER PRIMARY KEY turns into a new rowid (5), not 4 again.
  CHECK(store.WithStatement(kInsert, [](Stmt& st) { return st.Run(); }).ok());
  CHECK(QueryInt(store, "SELECT max(x) FROM a") == 5);
  CHECK(store.cached_statements() == 1);

  // A text that does not prepare is an error that names it, and is not kept.
  absl::Status bad = store.WithStatement("INSERT INTO nowhere VALUES(1)",
                                         [](Stmt& st) { return st.Run(); });
  CHECK(bad.code() == absl::StatusCode::kInternal);
  CHECK(bad.message().find("INSERT INTO nowhere") != absl::string_view::npos);
  CHECK(store.cached_statements() == 1);
}

}  // namespace
}  // namespace mycel::store
