#include "daemon/store/store.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "daemon/store/hlc.h"
#include "runtime/fs.h"
#include "runtime/status.h"
#include "tests/testing/power_loss_vfs.h"
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
constexpr Migration kTwoThenBroken[] = {
    kTwo[0],
    kTwo[1],
    {3, "CREATE TABLE c (z INTEGER); THIS IS NOT SQL;"},
};
constexpr TableInfo kTables[] = {
    {"a", Replication::kNodeLocal, ""},
    {"b", Replication::kNodeLocal, ""},
};

// A clock a test sets, backwards too (as a wall clock can be).
class SetClock final : public Clock {
 public:
  absl::Time Now() const override { return now; }
  void RunAfter(absl::Duration, std::function<void()>) override {
    FAIL("no timers");
  }
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
};

// The single value of a query's single row.
template <typename T>
T QueryOne(Store& store, const char* sql) {
  std::optional<T> out;
  absl::Status s = store.Query(
      sql, [](Stmt&) {},
      [&](const Stmt& st) {
        if constexpr (std::is_same_v<T, std::string>) {
          out = st.ColumnText(0);
        } else {
          out = st.ColumnInt(0);
        }
        return absl::OkStatus();
      });
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  REQUIRE(out.has_value());
  return *out;
}
// As QueryText, for threads other than the test's: no assertion.
absl::StatusOr<std::string> QueryOneOr(Store& store, const char* sql) {
  std::optional<std::string> out;
  RETURN_IF_ERROR(store.Query(
      sql, [](Stmt&) {},
      [&](const Stmt& st) {
        out = st.ColumnText(0);
        return absl::OkStatus();
      }));
  if (!out.has_value()) return absl::NotFoundError(sql);
  return *out;
}
int64_t QueryInt(Store& store, const char* sql) {
  return QueryOne<int64_t>(store, sql);
}
std::string QueryText(Store& store, const char* sql) {
  return QueryOne<std::string>(store, sql);
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
  // Every built-in table exists (and ReadSchema checked the converse).
  for (const TableInfo& t : BuiltinTables()) {
    std::string sql = "SELECT count(*) FROM sqlite_schema WHERE name='" +
                      std::string(t.name) + "'";
    CHECK_MESSAGE(QueryInt(**store, sql.c_str()) == 1, t.name);
  }
}

TEST_CASE("a table no one declared node-local or replicated is refused") {
  testing::TempDir dir;
  auto s = Store::Open(dir.Sub("u.db"),
                       {.migrations = kTwo, .tables = std::span(kTables, 1)});
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(s.status().message().find("table b is not declared") !=
                    absl::string_view::npos,
                s.status().ToString());
}

TEST_CASE("migrations run forward from the stored version, once each") {
  testing::TempDir dir;
  std::string path = dir.Sub("m.db");
  {
    auto s = Store::Open(path, {.migrations = kOne, .tables = kTables});
    REQUIRE(s.ok());
    CHECK((*s)->schema_version() == 1);
    REQUIRE((*s)->Execute("INSERT INTO a VALUES (7)").ok());
  }
  auto s = Store::Open(path, {.migrations = kTwo, .tables = kTables});
  REQUIRE(s.ok());
  CHECK((*s)->schema_version() == 2);
  CHECK(QueryInt(**s, "SELECT x FROM a") == 7);  // data survived
  // Foreign keys are enforced by the migrated schema.
  absl::Status fk = (*s)->Execute("INSERT INTO b VALUES (99)");
  CHECK_MESSAGE(fk.code() == absl::StatusCode::kFailedPrecondition,
                fk.ToString());
  // Opening again applies nothing new.
  s->reset();
  CHECK(Store::Open(path, {.migrations = kTwo, .tables = kTables}).ok());
}

TEST_CASE("a schema newer than the binary is refused, naming both versions") {
  testing::TempDir dir;
  std::string path = dir.Sub("new.db");
  REQUIRE(Store::Open(path, {.migrations = kTwo, .tables = kTables}).ok());
  auto s = Store::Open(path, {.migrations = kOne, .tables = kTables});
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s.status().message() ==
        "state database " + path +
            ": schema version 2 is newer than this myceld supports (1); run a "
            "newer myceld or restore an older database");
}

TEST_CASE(
    "a failed migration rolls back every pending version and leaves the "
    "version alone") {
  testing::TempDir dir;
  std::string path = dir.Sub("b.db");
  // Opens `path` with `migrations`, which must fail at `version`, then
  // with kOne: the database is where it was, at version 1.
  auto fails_at = [&](std::span<const Migration> migrations, int version) {
    auto s = Store::Open(path, {.migrations = migrations, .tables = kTables});
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().message().find(
              absl::StrCat("migration to schema version ", version)) !=
          absl::string_view::npos);
    auto again = Store::Open(path, {.migrations = kOne, .tables = kTables});
    REQUIRE(again.ok());
    CHECK(QueryInt(**again, "PRAGMA user_version") == 1);
    CHECK(QueryInt(**again,
                   "SELECT count(*) FROM sqlite_schema WHERE name IN ('b', "
                   "'c')") == 0);
  };
  // A new database: made at version 1 by the second open.
  fails_at(kBroken, 2);
  // An upgrade over versions 2 and 3 where 3 fails keeps 2 neither.
  fails_at(kTwoThenBroken, 3);
  auto up = Store::Open(path, {.migrations = kTwo, .tables = kTables});
  REQUIRE(up.ok());
  CHECK(QueryInt(**up, "PRAGMA user_version") == 2);
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
  // Built with no journal, it runs on a WAL from its first open: the
  // header's write and read versions (bytes 18 and 19) are 2, WAL's.
  {
    absl::StatusOr<std::string> bytes = ReadFile(path);
    REQUIRE(bytes.ok());
    REQUIRE(bytes->size() >= 100);
    CHECK(absl::StartsWith(*bytes, "SQLite format 3"));
    CHECK((*bytes)[18] == 2);
    CHECK((*bytes)[19] == 2);
  }
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
    auto s = Store::Open(path, {.migrations = kOne, .tables = kTables});
    REQUIRE(s.ok());
    REQUIRE((*s)->Execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL "
                          "SELECT i+1 FROM n WHERE i<3000) "
                          "INSERT INTO a SELECT i FROM n")
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
  auto s = Store::Open(path, {.migrations = kOne, .tables = kTables});
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kDataLoss);
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
  auto s =
      Store::Open(dir.Sub("tx.db"), {.migrations = kOne, .tables = kTables});
  REQUIRE(s.ok());
  absl::Status st = (*s)->InTransaction([](Transaction& tx) -> absl::Status {
    absl::Status ins = tx.Execute("INSERT INTO a VALUES (1)");
    if (!ins.ok()) return ins;
    CHECK(tx.Execute("INSERT INTO a VALUES (2)").ok());
    return absl::AbortedError("changed my mind");
  });
  CHECK(st.code() == absl::StatusCode::kAborted);
  CHECK(QueryInt(**s, "SELECT count(*) FROM a") == 0);
  // And one that succeeds keeps all of it.
  CHECK((*s)->InTransaction([](Transaction& tx) -> absl::Status {
              RETURN_IF_ERROR(tx.Execute("INSERT INTO a VALUES (1)"));
              return tx.Execute("INSERT INTO a VALUES (2)");
            })
            .ok());
  CHECK(QueryInt(**s, "SELECT count(*) FROM a") == 2);
}

TEST_CASE("a kept statement is prepared once and runs with fresh bindings") {
  testing::TempDir dir;
  auto s = Store::Open(dir.Sub("cached.db"),
                       {.migrations = kTwo, .tables = kTables});
  REQUIRE(s.ok());
  Store& store = **s;
  constexpr char kInsert[] = "INSERT INTO a(x) VALUES(?)";
  for (int64_t x : {1, 2, 3}) {
    CHECK(store.Execute(kInsert, [&](Stmt& st) { st.Bind(1, x); }).ok());
  }
  CHECK(store.cached_statements() == 1);
  CHECK(QueryInt(store, "SELECT sum(x) FROM a") == 6);

  // A run that fails (x is the primary key) returns its error and leaves
  // the statement reset and usable.
  absl::Status dup =
      store.Execute(kInsert, [](Stmt& st) { st.Bind(1, int64_t{2}); });
  CHECK(dup.code() == absl::StatusCode::kAlreadyExists);
  CHECK(store.Execute(kInsert, [](Stmt& st) { st.Bind(1, int64_t{4}); }).ok());
  // Bindings do not carry over: an unbound parameter is NULL, which the
  // STRICT INTEGER PRIMARY KEY turns into a new rowid (5), not 4 again.
  CHECK(store.Execute(kInsert).ok());
  CHECK(QueryInt(store, "SELECT max(x) FROM a") == 5);
  const size_t kept = store.cached_statements();  // and the two queries

  // A text that does not prepare is an error that names it, and is not kept.
  absl::Status bad = store.Execute("INSERT INTO nowhere VALUES(1)");
  CHECK(bad.code() == absl::StatusCode::kInternal);
  CHECK(bad.message().find("INSERT INTO nowhere") != absl::string_view::npos);
  CHECK(store.cached_statements() == kept);
  // A query whose row function fails stops there with that error.
  int rows = 0;
  absl::Status stopped = store.Query(
      "SELECT x FROM a ORDER BY x", [](Stmt&) {},
      [&](const Stmt&) {
        return ++rows == 2 ? absl::DataLossError("row 2") : absl::OkStatus();
      });
  CHECK(stopped.code() == absl::StatusCode::kDataLoss);
  CHECK(rows == 2);
}

// A replicated table and its schema, beside the built-in ones.
constexpr Migration kReplicatedSchema[] = {
    {1, R"sql(
CREATE TABLE local (k TEXT PRIMARY KEY, v TEXT) STRICT;
CREATE TABLE shared (k TEXT PRIMARY KEY, v TEXT, hlc INTEGER) STRICT;
CREATE TABLE change_log (
  origin TEXT NOT NULL, seq INTEGER NOT NULL, hlc INTEGER NOT NULL,
  tbl TEXT NOT NULL, key TEXT NOT NULL, value BLOB, signature BLOB,
  PRIMARY KEY (origin, seq)) STRICT, WITHOUT ROWID;
CREATE INDEX change_log_hlc ON change_log(hlc);
)sql"},
};
constexpr TableInfo kReplicatedTables[] = {
    {"local", Replication::kNodeLocal, ""},
    {"shared", Replication::kReplicated, ""},
    {"change_log", Replication::kChangeLog, ""},
};

// A store of that schema, as node "node-a", on `clock`.
Store::Options ReplicatedOptions(const Clock* clock) {
  return {.migrations = kReplicatedSchema,
          .tables = kReplicatedTables,
          .origin = "node-a",
          .clock = clock};
}

absl::StatusOr<ChangeStamp> Put(Store& store, const std::string& k,
                                const std::string& v) {
  return store.WriteReplicated(
      {.table = "shared", .key = k, .value = v},
      [&](Transaction& tx, const ChangeStamp& stamp) {
        return tx.Execute(
            "INSERT INTO shared(k, v, hlc) VALUES(?, ?, ?) ON CONFLICT(k) DO "
            "UPDATE SET v=excluded.v, hlc=excluded.hlc",
            [&](Stmt& st) {
              st.Bind(1, k).Bind(2, v).Bind(3, static_cast<int64_t>(stamp.hlc));
            });
      });
}

TEST_CASE("a replicated table is written only through WriteReplicated") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = ReplicatedOptions(&clock);
  auto s = Store::Open(dir.Sub("r.db"), options);
  REQUIRE(s.ok());
  Store& store = **s;

  // Straight writes to the replicated table, or to the log, are refused
  // with a message that says the way in; node-local tables are not.
  for (const char* sql :
       {"INSERT INTO shared(k, v) VALUES('x', 'y')", "UPDATE shared SET v='z'",
        "DELETE FROM shared", "DELETE FROM change_log"}) {
    absl::Status direct = store.Execute(sql);
    CHECK_MESSAGE(direct.code() == absl::StatusCode::kFailedPrecondition, sql,
                  " ", direct.ToString());
    CHECK(direct.message().find("WriteReplicated") != absl::string_view::npos);
  }
  absl::Status in_tx = store.InTransaction([](Transaction& tx) {
    return tx.Execute("INSERT INTO shared(k, v) VALUES('x', 'y')");
  });
  CHECK(in_tx.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(store.Execute("INSERT INTO local VALUES('x', 'y')").ok());
  // Reads are free.
  CHECK(QueryInt(store, "SELECT count(*) FROM shared") == 0);
  // WriteReplicated names only replicated tables.
  auto wrong = store.WriteReplicated(
      {.table = "local", .key = "x", .value = "y"},
      [](Transaction&, const ChangeStamp&) { return absl::OkStatus(); });
  CHECK(wrong.status().code() == absl::StatusCode::kInvalidArgument);

  auto first = Put(store, "x", "1");
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  CHECK(first->origin == "node-a");
  CHECK(first->seq == 1);
  CHECK(HlcMillis(first->hlc) == absl::ToUnixMillis(clock.now));
  CHECK(QueryText(store, "SELECT v FROM shared WHERE k='x'") == "1");
  CHECK(QueryInt(store, "SELECT count(*) FROM change_log") == 1);
  CHECK(QueryText(store,
                  "SELECT tbl || '/' || key || '=' || value FROM "
                  "change_log WHERE seq=1") == "shared/x=1");

  // A change whose apply fails is rolled back whole and takes no sequence
  // number: the origin's sequence stays without gaps.
  auto failed = store.WriteReplicated(
      {.table = "shared", .key = "y", .value = "2"},
      [](Transaction& tx, const ChangeStamp&) -> absl::Status {
        RETURN_IF_ERROR(tx.Execute("INSERT INTO shared(k, v) VALUES('y', 2)"));
        return absl::AbortedError("no");
      });
  CHECK(failed.status().code() == absl::StatusCode::kAborted);
  CHECK(QueryInt(store, "SELECT count(*) FROM shared") == 1);
  CHECK(QueryInt(store, "SELECT count(*) FROM change_log") == 1);

  // The same millisecond twice: the counter orders them.
  auto second = Put(store, "x", "2");
  REQUIRE(second.ok());
  CHECK(second->seq == 2);
  CHECK(second->hlc > first->hlc);

  // A deletion is logged with no value.
  auto gone = store.WriteReplicated(
      {.table = "shared", .key = "x", .value = std::nullopt},
      [](Transaction& tx, const ChangeStamp&) {
        return tx.Execute("DELETE FROM shared WHERE k='x'");
      });
  REQUIRE(gone.ok());
  CHECK(gone->seq == 3);
  CHECK(QueryInt(store, "SELECT value IS NULL FROM change_log WHERE seq=3") ==
        1);
  const HlcTime last = gone->hlc;
  s->reset();

  // After a restart with the wall clock an hour behind, the sequence goes
  // on from the log and no stamp is earlier than one made before.
  clock.now -= absl::Hours(1);
  auto again = Store::Open(dir.Sub("r.db"), options);
  REQUIRE(again.ok());
  auto after = Put(**again, "z", "3");
  REQUIRE(after.ok());
  CHECK(after->seq == 4);
  CHECK(after->hlc > last);
  // Another origin's log (as replication will write it) does not move
  // this node's sequence.
  options.origin = "node-b";
  again->reset();
  auto b = Store::Open(dir.Sub("r.db"), options);
  REQUIRE(b.ok());
  auto from_b = Put(**b, "w", "4");
  REQUIRE(from_b.ok());
  CHECK(from_b->seq == 1);
  CHECK(from_b->hlc > after->hlc);  // the floor is the highest of any origin
}

TEST_CASE(
    "group commit: concurrent writers share commits, each gets its own "
    "result, and a failing write takes only itself") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = ReplicatedOptions(&clock);
  options.synchronous_full = true;
  auto s = Store::Open(dir.Sub("g.db"), options);
  REQUIRE(s.ok());
  Store& store = **s;
  constexpr int kThreads = 8;
  constexpr int kWrites = 100;
  // Every 7th write of a thread fails in its apply, after writing a row.
  std::vector<std::vector<absl::StatusOr<ChangeStamp>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        const std::string k = absl::StrCat(t, "/", i);
        if (i % 7 == 3) {
          results[t].push_back(store.WriteReplicated(
              {.table = "shared", .key = k, .value = "bad"},
              [&](Transaction& tx, const ChangeStamp&) -> absl::Status {
                RETURN_IF_ERROR(
                    tx.Execute("INSERT INTO shared(k, v) VALUES(?, 'bad')",
                               [&](Stmt& st) { st.Bind(1, k); }));
                return absl::AbortedError("refused on purpose");
              }));
        } else {
          results[t].push_back(Put(store, k, absl::StrCat(i)));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::set<int64_t> seqs;
  int ok = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kWrites; ++i) {
      const absl::StatusOr<ChangeStamp>& r = results[t][i];
      if (i % 7 == 3) {
        CHECK(r.status().code() == absl::StatusCode::kAborted);
        continue;
      }
      REQUIRE_MESSAGE(r.ok(), r.status().ToString());
      ++ok;
      seqs.insert(r->seq);
      // Its own row, with its own stamp.
      const std::string sql =
          absl::StrCat("SELECT v FROM shared WHERE k='", t, "/", i, "'");
      CHECK(QueryText(store, sql.c_str()) == absl::StrCat(i));
    }
  }
  // The sequence has no gap and no repeat; the failed writes left nothing.
  REQUIRE(static_cast<int>(seqs.size()) == ok);
  CHECK(*seqs.begin() == 1);
  CHECK(*seqs.rbegin() == ok);
  CHECK(QueryInt(store, "SELECT count(*) FROM shared") == ok);
  CHECK(QueryInt(store, "SELECT count(*) FROM change_log") == ok);
  CHECK(QueryInt(store, "SELECT count(*) FROM shared WHERE v='bad'") == 0);
  Store::GroupCommitStats stats = store.group_commit_stats();
  CHECK(stats.writes == kThreads * kWrites);
  MESSAGE(stats.writes, " writes in ", stats.commits, " commits");
  // Eight writers on an fsync each time: some commits must have been
  // shared. (One writer at a time would make exactly one per write.)
  CHECK(stats.commits < stats.writes);
  // The order of the log is the order of the sequence.
  CHECK(QueryInt(store,
                 "SELECT count(*) FROM change_log a JOIN change_log b ON "
                 "a.seq < b.seq WHERE a.hlc >= b.hlc") == 0);
}

TEST_CASE(
    "checkpoints run beside the commits and the WAL stays bounded under a "
    "steady stream of writes") {
  testing::TempDir dir;
  SetClock clock;
  const std::string path = dir.Sub("c.db");
  constexpr int kThreads = 4;
  constexpr int kWrites = 3000;
  // Values of 2 KB: each commit writes several pages to the WAL.
  const std::string value(2048, 'v');
  {
    auto s = Store::Open(path, ReplicatedOptions(&clock));
    REQUIRE(s.ok());
    Store& store = **s;
    std::vector<std::thread> threads;
    std::atomic<int> failed{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kWrites; ++i) {
          if (!Put(store, absl::StrCat(t, "/", i), value).ok()) ++failed;
        }
      });
    }
    for (std::thread& th : threads) th.join();
    CHECK(failed.load() == 0);
    // The checkpointer copied the WAL while the writers wrote...
    CHECK(store.background_checkpoints() > 0);
    // ... and the WAL started over instead of growing without end: at most
    // about 4,000 frames of 4 KiB (kRestartFrames) and what one group
    // commit adds, where the writes made more than 12,000 frames.
    std::error_code ec;
    const auto wal = std::filesystem::file_size(path + "-wal", ec);
    REQUIRE_FALSE(ec);
    MESSAGE("WAL: ", wal, " bytes after ", kThreads * kWrites, " writes");
    CHECK(wal < 5000u * (4096 + 24));
    CHECK(QueryInt(store, "SELECT count(*) FROM shared") == kThreads * kWrites);
    // The explicit checkpoint (myceld's at shutdown) waits for a pass of
    // the checkpointer rather than failing BUSY beside it, and empties the
    // WAL.
    // Each round writes past 1,000 frames, which wakes the checkpointer.
    for (int round = 0; round < 5; ++round) {
      for (int i = 0; i < 4; ++i) {
        REQUIRE(Put(store, absl::StrCat("last/", round * 4 + i),
                    std::string(1 << 20, 'w'))
                    .ok());
      }
      absl::Status c = store.Checkpoint();
      CHECK_MESSAGE(c.ok(), c.ToString());
    }
    CHECK(std::filesystem::file_size(path + "-wal") == 0);
  }
  // Closed and opened again: every write is there.
  constexpr int kAll = kThreads * kWrites + 20;
  auto again = Store::Open(path, ReplicatedOptions(&clock));
  REQUIRE(again.ok());
  CHECK(QueryInt(**again, "SELECT count(*) FROM shared") == kAll);
  CHECK(QueryInt(**again, "SELECT count(*) FROM change_log") == kAll);
  CHECK(QueryText(**again, "PRAGMA integrity_check") == "ok");
}

TEST_CASE(
    "group commit on a full database: what answered OK is there, no more") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = ReplicatedOptions(&clock);
  auto s = Store::Open(dir.Sub("f.db"), options);
  REQUIRE(s.ok());
  Store& store = **s;
  // A database that cannot grow past its current size plus a little:
  // writes start failing with SQLITE_FULL inside group commits. (Here
  // SQLite rolls back the failing statement only; the store also ends the
  // batch when SQLite rolls back the whole transaction, as it may on I/O
  // errors, which this test does not produce.)
  const int64_t pages = QueryInt(store, "PRAGMA page_count");
  REQUIRE(
      store.Execute(absl::StrCat("PRAGMA max_page_count=", pages + 8).c_str())
          .ok());
  std::mutex mu;
  std::vector<std::pair<std::string, int64_t>> acked;  // key, seq
  int failed = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        const std::string k = absl::StrCat(t, "/", i);
        auto r = Put(store, k, std::string(400, 'x'));
        std::lock_guard<std::mutex> lock(mu);
        if (r.ok()) {
          acked.emplace_back(k, r->seq);
        } else {
          ++failed;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  MESSAGE(acked.size(), " writes acknowledged, ", failed, " refused");
  REQUIRE(failed > 0);  // the limit was reached
  // Every acknowledged write is there, with its sequence; nothing else is;
  // the sequence has no gap and no repeat.
  CHECK(QueryInt(store, "SELECT count(*) FROM shared") ==
        static_cast<int64_t>(acked.size()));
  CHECK(QueryInt(store, "SELECT count(*) FROM change_log") ==
        static_cast<int64_t>(acked.size()));
  std::set<int64_t> seqs;
  for (const auto& [k, seq] : acked) {
    seqs.insert(seq);
    const std::string sql = absl::StrCat(
        "SELECT count(*) FROM change_log WHERE key='", k, "' AND seq=", seq);
    CHECK_MESSAGE(QueryInt(store, sql.c_str()) == 1, sql);
  }
  CHECK(seqs.size() == acked.size());
  if (!seqs.empty()) {
    CHECK(*seqs.begin() == 1);
    CHECK(*seqs.rbegin() == static_cast<int64_t>(seqs.size()));
  }
}

// SubmitReplicated's apply for a row of table shared.
Store::ApplyFn PutRow(std::string k, std::string v) {
  return [k = std::move(k), v = std::move(v)](Transaction& tx,
                                              const ChangeStamp& stamp) {
    return tx.Execute(
        "INSERT INTO shared(k, v, hlc) VALUES(?, ?, ?) ON CONFLICT(k) DO "
        "UPDATE SET v=excluded.v, hlc=excluded.hlc",
        [&](Stmt& st) {
          st.Bind(1, k).Bind(2, v).Bind(3, static_cast<int64_t>(stamp.hlc));
        });
  };
}

TEST_CASE(
    "SubmitReplicated answers each write once, after its commit, in order, "
    "and a write from an answer fails instead of waiting for itself") {
  testing::TempDir dir;
  SetClock clock;
  const std::string path = dir.Sub("s.db");
  constexpr int kWrites = 200;
  struct Answer {
    std::string key;
    absl::StatusOr<ChangeStamp> stamp;
    // The row, read by the answer: it was committed before.
    std::string seen;
  };
  std::mutex mu;
  std::vector<Answer> answers;
  absl::Status nested = absl::OkStatus();
  {
    auto s = Store::Open(path, ReplicatedOptions(&clock));
    REQUIRE(s.ok());
    Store& store = **s;
    absl::BlockingCounter left(kWrites + 1);
    auto answer = [&](std::string k) {
      return [&, k](absl::StatusOr<ChangeStamp> r) {
        Answer a{k, std::move(r), ""};
        const std::string sql =
            absl::StrCat("SELECT v FROM shared WHERE k='", k, "'");
        absl::StatusOr<std::string> seen = QueryOneOr(store, sql.c_str());
        if (seen.ok()) a.seen = *seen;
        if (k == "0") {
          nested = Put(store, "nested", "x").status();
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          answers.push_back(std::move(a));
        }
        left.DecrementCount();
      };
    };
    // One submitter, no waiting between writes: the committer takes many
    // at a time.
    for (int i = 0; i < kWrites; ++i) {
      const std::string k = absl::StrCat(i);
      if (i == 100) {
        store.SubmitReplicated(
            {.table = "shared", .key = "bad", .value = "x"},
            [](Transaction& tx, const ChangeStamp&) -> absl::Status {
              RETURN_IF_ERROR(tx.Execute(
                  "INSERT INTO shared(k, v) VALUES('bad', 'x')", [](Stmt&) {}));
              return absl::AbortedError("refused on purpose");
            },
            answer("bad"));
      }
      store.SubmitReplicated({.table = "shared", .key = k, .value = k},
                             PutRow(k, k), answer(k));
    }
    left.Wait();
    Store::GroupCommitStats stats = store.group_commit_stats();
    MESSAGE(stats.writes, " writes in ", stats.commits, " commits");
    CHECK(stats.writes == kWrites + 1);
    CHECK(stats.commits < stats.writes);
    // Queued behind the store's closing: committed and answered before
    // the store is gone.
    for (int i = 0; i < 50; ++i) {
      const std::string k = absl::StrCat("late/", i);
      store.SubmitReplicated({.table = "shared", .key = k, .value = k},
                             PutRow(k, k),
                             [&, k](absl::StatusOr<ChangeStamp> r) {
                               std::lock_guard<std::mutex> lock(mu);
                               answers.push_back({k, std::move(r), ""});
                             });
    }
  }
  CHECK(absl::IsFailedPrecondition(nested));
  REQUIRE(answers.size() == kWrites + 1 + 50);
  int64_t last = 0;
  for (const Answer& a : answers) {
    if (a.key == "bad") {
      CHECK(absl::IsAborted(a.stamp.status()));
      continue;
    }
    REQUIRE_MESSAGE(a.stamp.ok(), a.key, ": ", a.stamp.status());
    // Answered in the order of the sequence, which is the order submitted.
    CHECK(a.stamp->seq == last + 1);
    last = a.stamp->seq;
    if (!absl::StartsWith(a.key, "late/")) CHECK(a.seen == a.key);
  }
  auto reopened = Store::Open(path, ReplicatedOptions(&clock));
  REQUIRE(reopened.ok());
  CHECK(QueryInt(**reopened, "SELECT count(*) FROM shared") == kWrites + 50);
  CHECK(QueryInt(**reopened, "SELECT count(*) FROM change_log") ==
        kWrites + 50);
  CHECK(QueryInt(**reopened, "SELECT count(*) FROM shared WHERE k='bad'") == 0);
}

// Holds the store's committer on a first write whose statements wait until
// Release(), so that the writes submitted next queue behind it. Answer()
// records the answer of a write; Release() lets the first write go and
// returns every recorded answer once `answers` writes besides the first
// have been answered.
class HeldCommitter {
 public:
  HeldCommitter(Store& store, int answers) : left_(answers + 1) {
    store.SubmitReplicated(
        {.table = "shared", .key = "first", .value = "1"},
        [this, put = PutRow("first", "1")](Transaction& tx,
                                           const ChangeStamp& stamp) mutable {
          started_.Notify();
          release_.WaitForNotification();
          return put(tx, stamp);
        },
        Answer());
    started_.WaitForNotification();
  }

  Store::DoneFn Answer() {
    return [this](absl::StatusOr<ChangeStamp> r) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        results_.push_back(r.status());
      }
      left_.DecrementCount();
    };
  }

  std::vector<absl::Status> Release() {
    release_.Notify();
    left_.Wait();
    std::lock_guard<std::mutex> lock(mu_);
    return results_;
  }

 private:
  absl::Notification started_, release_;
  absl::BlockingCounter left_;
  std::mutex mu_;
  std::vector<absl::Status> results_;
};

TEST_CASE(
    "a full write queue refuses at once with RESOURCE_EXHAUSTED, and a "
    "commit holds at most kMaxBatch writes") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = ReplicatedOptions(&clock);
  constexpr size_t kQueue = 2500;
  options.max_queued_writes = kQueue;
  auto s = Store::Open(dir.Sub("q.db"), options);
  REQUIRE(s.ok());
  Store& store = **s;
  const Store::GroupCommitStats before = store.group_commit_stats();
  HeldCommitter held(store, static_cast<int>(kQueue));
  for (size_t i = 0; i < kQueue; ++i) {
    const std::string k = absl::StrCat("q/", i);
    store.SubmitReplicated({.table = "shared", .key = k, .value = k},
                           PutRow(k, k), held.Answer());
  }
  // One more: refused on this thread, before this call returns.
  std::optional<absl::Status> refused;
  store.SubmitReplicated(
      {.table = "shared", .key = "over", .value = "1"}, PutRow("over", "1"),
      [&](absl::StatusOr<ChangeStamp> r) { refused = r.status(); });
  REQUIRE(refused.has_value());
  CHECK(absl::IsResourceExhausted(*refused));
  CHECK(refused->message().find("2500 writes already wait") !=
        std::string::npos);
  for (const absl::Status& r : held.Release()) CHECK_MESSAGE(r.ok(), r);
  const Store::GroupCommitStats after = store.group_commit_stats();
  // The first write's commit, then the 2,500 queued in commits of at most
  // 1,000.
  CHECK(after.writes - before.writes == kQueue + 1);
  CHECK(after.commits - before.commits >= 1 + 3);
  CHECK(QueryInt(store, "SELECT count(*) FROM shared") ==
        static_cast<int64_t>(kQueue) + 1);
  CHECK(QueryInt(store, "SELECT count(*) FROM shared WHERE k='over'") == 0);
}

TEST_CASE(
    "queued writes are bounded by bytes too: large values are refused before "
    "they fill memory, a write alone is always taken") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = ReplicatedOptions(&clock);
  options.max_queued_bytes = 10'000;
  auto s = Store::Open(dir.Sub("b.db"), options);
  REQUIRE(s.ok());
  Store& store = **s;
  HeldCommitter held(store, 1);
  // Alone in the queue (the first is being committed): taken, although it
  // is over the limit by itself.
  const std::string big(20'000, 'x');
  store.SubmitReplicated({.table = "shared", .key = "big", .value = big},
                         PutRow("big", big), held.Answer());
  // Behind it, anything more is refused at once.
  std::optional<absl::Status> refused;
  store.SubmitReplicated(
      {.table = "shared", .key = "small", .value = "1"}, PutRow("small", "1"),
      [&](absl::StatusOr<ChangeStamp> r) { refused = r.status(); });
  REQUIRE(refused.has_value());
  CHECK(absl::IsResourceExhausted(*refused));
  CHECK(refused->message().find("(limit 10000)") != std::string::npos);
  for (const absl::Status& r : held.Release()) CHECK_MESSAGE(r.ok(), r);
  // Once the queue has drained, its bytes are free again.
  REQUIRE(Put(store, "after", "1").ok());
  CHECK(QueryInt(store, "SELECT count(*) FROM shared") == 3);
  CHECK(QueryInt(store, "SELECT count(*) FROM shared WHERE k='small'") == 0);
}

// Drops `store` as a crash would, without closing it (closing checkpoints
// and syncs), then loses whatever was not synced, as a power loss may.
// ReplicatedOptions over the power-loss VFS (registered here).
Store::Options PowerLossOptions(const Clock* clock) {
  testing::RegisterPowerLossVfs();
  Store::Options options = ReplicatedOptions(clock);
  options.vfs = testing::kPowerLossVfs;
  return options;
}

// The connection is leaked: SimulatePowerLoss puts new files in place, so
// its locks are on files no longer there.
void PowerLoss(std::unique_ptr<Store> store, const std::string& path) {
  (void)store.release();
  absl::Status s = testing::SimulatePowerLoss(path);
  REQUIRE_MESSAGE(s.ok(), s);
}

TEST_CASE(
    "a power loss keeps every commit under FULL, and under NORMAL what a sync "
    "or the durable listener made durable") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = PowerLossOptions(&clock);
  const std::string path = dir.Sub("p.db");
  auto open = [&](bool full) {
    options.synchronous_full = full;
    auto s = Store::Open(path, options);
    REQUIRE_MESSAGE(s.ok(), s.status());
    return *std::move(s);
  };
  auto put = [](Store& store, int i) {
    auto stamp = Put(store, absl::StrCat("k", i), "v");
    REQUIRE_MESSAGE(stamp.ok(), stamp.status());
    return stamp->seq;
  };

  // NORMAL: commits are acknowledged before they are on disk.
  std::unique_ptr<Store> store = open(false);
  CHECK(store->durable_seq() == 0);
  for (int i = 1; i <= 5; ++i) CHECK(put(*store, i) == i);
  CHECK(store->durable_seq() == 0);
  auto synced = store->Sync();
  REQUIRE(synced.ok());
  CHECK(*synced == 5);
  CHECK(store->durable_seq() == 5);
  for (int i = 6; i <= 8; ++i) CHECK(put(*store, i) == i);
  CHECK(store->durable_seq() == 5);
  PowerLoss(std::move(store), path);

  store = open(false);
  // The three commits after the sync are gone, acknowledged as they were:
  // what NORMAL does not promise. The next write takes their numbers,
  // which is why replication publishes only up to durable_seq.
  CHECK(QueryInt(*store, "SELECT count(*) FROM shared") == 5);
  CHECK(QueryInt(*store, "SELECT max(seq) FROM change_log") == 5);
  CHECK(store->durable_seq() == 5);
  CHECK(put(*store, 6) == 6);

  // With a durable listener, the committer syncs after each commit and
  // then tells it.
  std::atomic<int64_t> heard{0};
  store->SetDurableListener([&](int64_t seq) { heard = seq; });
  for (int i = 7; i <= 20; ++i) put(*store, i);
  for (int spins = 0; heard.load() < 20 && spins < 5000; ++spins) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  CHECK(heard.load() == 20);
  CHECK(store->durable_seq() == 20);
  // Many at once, as under load (the committer then syncs less often than
  // it commits): the last is made durable once the queue drains.
  std::atomic<int> answered{0};
  for (int i = 21; i <= 520; ++i) {
    const std::string k = absl::StrCat("k", i);
    store->SubmitReplicated({.table = "shared", .key = k, .value = "v"},
                            PutRow(k, "v"), [&](absl::StatusOr<ChangeStamp> r) {
                              CHECK(r.ok());
                              ++answered;
                            });
  }
  for (int spins = 0; heard.load() < 520 && spins < 5000; ++spins) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  CHECK(answered.load() == 500);
  CHECK(heard.load() == 520);
  PowerLoss(std::move(store), path);
  store = open(false);
  CHECK(QueryInt(*store, "SELECT count(*) FROM shared") == 520);
  CHECK(QueryInt(*store, "SELECT max(seq) FROM change_log") == 520);
  // Opening synced what it found: durable from the start.
  CHECK(store->durable_seq() == 520);
  store.reset();

  // FULL: every acknowledged commit was synced before its answer.
  store = open(true);
  for (int i = 521; i <= 530; ++i) CHECK(put(*store, i) == i);
  PowerLoss(std::move(store), path);
  store = open(true);
  CHECK(QueryInt(*store, "SELECT count(*) FROM shared") == 530);
  CHECK(QueryInt(*store, "SELECT max(seq) FROM change_log") == 530);
  CHECK(put(*store, 531) == 531);
}

TEST_CASE(
    "under NORMAL the checkpointer syncs the WAL between its passes, so a "
    "power loss keeps what filled the WAL before the last sync") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = PowerLossOptions(&clock);
  const std::string path = dir.Sub("s.db");
  auto frames = [&] {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path + "-wal", ec);
    return ec || size < 32 ? 0 : static_cast<int>((size - 32) / (4096 + 24));
  };
  // Writes until the WAL holds about 600 frames: past two marks of 250,
  // short of the checkpointer's first pass at 1,000.
  auto fill = [&](Store& store) {
    int n = 0;
    while (frames() < 600) {
      REQUIRE(Put(store, absl::StrCat("k", ++n), std::string(3000, 'v')).ok());
    }
    return n;
  };

  auto opened = Store::Open(path, options);
  REQUIRE(opened.ok());
  std::unique_ptr<Store> store = *std::move(opened);
  const int written = fill(*store);
  for (int spins = 0; store->background_wal_syncs() < 2 && spins < 5000;
       ++spins) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  CHECK(store->background_wal_syncs() >= 2);
  CHECK(store->background_checkpoints() == 0);
  // Nothing else synced: no Sync, no listener, no checkpoint.
  CHECK(store->durable_seq() == 0);
  PowerLoss(std::move(store), path);
  auto again = Store::Open(path, options);
  REQUIRE(again.ok());
  // What the WAL held at the checkpointer's last sync survives, a prefix of
  // the writes with no gap; the writes after it may not.
  const int64_t kept = QueryInt(**again, "SELECT count(*) FROM shared");
  MESSAGE("kept ", kept, " of ", written, " writes");
  CHECK(kept > 0);
  CHECK(kept <= written);
  CHECK(QueryInt(**again, "SELECT max(seq) FROM change_log") == kept);
}

TEST_CASE("under FULL the checkpointer does not sync between its passes") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = ReplicatedOptions(&clock);
  options.synchronous_full = true;
  const std::string path = dir.Sub("f.db");
  auto opened = Store::Open(path, options);
  REQUIRE(opened.ok());
  Store& store = **opened;
  for (int i = 0; i < 300; ++i) {
    REQUIRE(Put(store, absl::StrCat("k", i), std::string(3000, 'v')).ok());
  }
  absl::SleepFor(absl::Milliseconds(50));
  CHECK(store.background_wal_syncs() == 0);
}

TEST_CASE("after a failed WAL sync no later sync is trusted until reopen") {
  testing::TempDir dir;
  SetClock clock;
  Store::Options options = PowerLossOptions(&clock);
  const std::string path = dir.Sub("f.db");
  auto opened = Store::Open(path, options);
  REQUIRE_MESSAGE(opened.ok(), opened.status());
  std::unique_ptr<Store> store = *std::move(opened);
  std::atomic<int64_t> heard{0};
  store->SetDurableListener([&](int64_t seq) { heard = seq; });
  auto settle = [&](int64_t want) {
    for (int spins = 0; heard.load() < want && spins < 2000; ++spins) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  REQUIRE(Put(*store, "a", "1").ok());
  settle(1);
  REQUIRE(heard.load() == 1);

  // The disk fails one sync: the write was answered, but is not published.
  testing::SetPowerLossSyncFailure(true);
  REQUIRE(Put(*store, "b", "2").ok());
  absl::SleepFor(absl::Milliseconds(50));
  CHECK(heard.load() == 1);
  CHECK(store->durable_seq() == 1);
  // The disk answers again, but what the failed sync left behind may be
  // lost: neither the committer nor Sync trusts a later sync.
  testing::SetPowerLossSyncFailure(false);
  REQUIRE(Put(*store, "c", "3").ok());
  absl::SleepFor(absl::Milliseconds(50));
  CHECK(heard.load() == 1);
  CHECK(store->durable_seq() == 1);
  absl::StatusOr<int64_t> synced = store->Sync();
  CHECK(synced.status().message() ==
        "sync the WAL: disk I/O error (disk I/O error, code 1034)");
  CHECK(store->durable_seq() == 1);

  // Opened anew, the store syncs what is really there and trusts it.
  store.reset();
  opened = Store::Open(path, options);
  REQUIRE_MESSAGE(opened.ok(), opened.status());
  store = *std::move(opened);
  CHECK(store->durable_seq() == 3);
  synced = store->Sync();
  REQUIRE(synced.ok());
  CHECK(*synced == 3);
}

TEST_CASE("the hybrid logical clock never goes back and refuses skew") {
  SetClock clock;
  Hlc hlc(&clock, 0);
  const HlcTime t1 = hlc.Now();
  CHECK(HlcMillis(t1) == absl::ToUnixMillis(clock.now));
  CHECK(HlcCounter(t1) == 0);
  const HlcTime t2 = hlc.Now();
  CHECK(HlcMillis(t2) == HlcMillis(t1));
  CHECK(HlcCounter(t2) == 1);
  // The wall clock steps back: stamps keep rising on the counter.
  clock.now -= absl::Seconds(5);
  const HlcTime t3 = hlc.Now();
  CHECK(t3 == t2 + 1);
  // The wall clock passes the highest time: stamps follow it again.
  clock.now += absl::Seconds(10);
  const HlcTime t4 = hlc.Now();
  CHECK(HlcMillis(t4) == absl::ToUnixMillis(clock.now));
  CHECK(HlcCounter(t4) == 0);

  // A remote time within the offset moves this clock past it.
  const HlcTime remote =
      MakeHlc(absl::ToUnixMillis(clock.now + absl::Milliseconds(200)), 7);
  auto received = hlc.Receive(remote, absl::Milliseconds(500));
  REQUIRE(received.ok());
  CHECK(*received == remote + 1);
  CHECK(hlc.Now() > remote);
  // One further ahead is refused and changes nothing.
  const HlcTime before = hlc.last();
  auto skewed =
      hlc.Receive(MakeHlc(absl::ToUnixMillis(clock.now + absl::Seconds(3)), 0),
                  absl::Milliseconds(500));
  CHECK(skewed.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(skewed.status().message().find("clock skew") !=
        absl::string_view::npos);
  CHECK(hlc.last() == before);
  // A full counter carries into the microseconds, still in order.
  Hlc full(&clock, MakeHlc(absl::ToUnixMillis(clock.now) + 1000, 0xffff));
  const HlcTime carried = full.Now();
  CHECK(HlcMillis(carried) == absl::ToUnixMillis(clock.now) + 1001);
  CHECK(HlcCounter(carried) == 0);
}

}  // namespace
}  // namespace mycel::store
