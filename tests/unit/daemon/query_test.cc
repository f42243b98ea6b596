// Read-only SQL over the local replica (daemon/store/query.h): what a query
// may read and call, and every attack a user could try, each with the
// status a client sees and nothing changed.
#include "daemon/store/query.h"

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"
#include "tests/testing/process.h"

namespace mycel::store {
namespace {

struct Fixture {
  Fixture() {
    auto s = Store::Open(dir.Sub("q.db"), Store::Options{.origin = "n1"});
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    store = *std::move(s);
    objects = std::make_unique<ObjectStore>(store.get());
    REQUIRE(objects->Write("kv", "app/a", R"({"n": 1})").ok());
    REQUIRE(objects->Write("kv", "app/b", R"({"n": 2})").ok());
    REQUIRE(objects->Write("kv", "gone", "0").ok());
    REQUIRE(objects->Write("kv", "gone", std::nullopt).ok());
    REQUIRE(objects->Write("other", "x", "secret-ish").ok());
    REQUIRE(store
                ->Execute("INSERT INTO join_tokens(id, secret_hash, "
                          "created_us, expires_us, uses_left) "
                          "VALUES('t1', 'hash-of-secret', 0, 0, 1)")
                .ok());
  }
  absl::StatusOr<QueryResult> Run(const std::string& sql,
                                  QueryLimits limits = {}) {
    return RunQuery(store.get(), sql, limits);
  }
  // What must not change whatever a query does.
  int64_t Count(const char* sql) {
    int64_t n = -1;
    REQUIRE(store
                ->Query(
                    sql, [](Stmt&) {},
                    [&](const Stmt& st) {
                      n = st.ColumnInt(0);
                      return absl::OkStatus();
                    })
                .ok());
    return n;
  }

  testing::TempDir dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<ObjectStore> objects;
};

TEST_CASE("a SELECT over kv answers live keys with their JSON and version") {
  Fixture f;
  auto r =
      f.Run("SELECT key, value ->> '$.n' AS n, version FROM kv ORDER BY key");
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  CHECK(r->columns == std::vector<std::string>{"key", "n", "version"});
  REQUIRE(r->rows.size() == 2);  // the deleted key and other namespaces: no
  CHECK(r->rows[0][0].bytes == "app/a");
  CHECK(r->rows[0][1].type == QueryValue::Type::kInteger);
  CHECK(r->rows[0][1].integer == 1);
  // The version the State API gives (origin:seq@hlc), to the byte.
  auto a = f.objects->Get("kv", "app/a");
  REQUIRE(a.ok());
  CHECK(r->rows[0][2].bytes == ObjectVersion::Of(a->stamp).ToString());
  CHECK(absl::StartsWith(r->rows[0][2].bytes, "n1:1@"));
  CHECK(!r->truncated);
}

TEST_CASE("every relation can be read, with joins, CTEs and aggregates") {
  Fixture f;
  for (absl::string_view rel : QueryRelations()) {
    auto r = f.Run(absl::StrCat("SELECT count(*) FROM ", rel));
    CHECK_MESSAGE(r.ok(), rel, ": ", r.status().ToString());
  }
  auto changes = f.Run("SELECT count(*) FROM changes WHERE origin='n1'");
  REQUIRE(changes.ok());
  CHECK(changes->rows[0][0].integer == 5);
  auto cte = f.Run(
      "WITH k AS (SELECT key FROM kv) SELECT k.key, c.seq FROM k JOIN "
      "changes c ON c.key = 'kv/' || k.key ORDER BY c.seq");
  REQUIRE_MESSAGE(cte.ok(), cte.status().ToString());
  CHECK(cte->rows.size() == 2);
}

TEST_CASE(
    "a query builds only the relations it names, wherever it names them") {
  Fixture f;
  using Names = std::vector<std::string>;
  auto members = f.Run("SELECT count(*) FROM members");
  REQUIRE_MESSAGE(members.ok(), members.status().ToString());
  CHECK(members->relations == Names{"members"});
  auto none = f.Run("SELECT 1 + 1");
  REQUIRE(none.ok());
  CHECK(none->relations.empty());
  CHECK(none->rows[0][0].integer == 2);
  // In a subquery, qualified, joined through a CTE: built, with its rows.
  auto sub = f.Run("SELECT 7 WHERE EXISTS (SELECT 1 FROM kv)");
  REQUIRE(sub.ok());
  CHECK(sub->relations == Names{"kv"});
  CHECK(sub->rows.size() == 1);
  auto qualified = f.Run("SELECT count(*) FROM temp.kv");
  REQUIRE(qualified.ok());
  CHECK(qualified->relations == Names{"kv"});
  CHECK(qualified->rows[0][0].integer == 2);
  auto joined = f.Run(
      "WITH k AS (SELECT key FROM kv) SELECT count(*) FROM k JOIN changes c "
      "ON c.key = 'kv/' || k.key");
  REQUIRE(joined.ok());
  CHECK(joined->relations == Names{"kv", "changes"});
  CHECK(joined->rows[0][0].integer == 2);
  // A CTE that takes a relation's name shadows it: the relation is built
  // for nothing, and the query reads the CTE.
  auto shadow = f.Run("WITH kv AS (SELECT 5 AS x) SELECT x FROM kv");
  REQUIRE(shadow.ok());
  REQUIRE(shadow->rows.size() == 1);
  CHECK(shadow->rows[0][0].integer == 5);
}

TEST_CASE("the time limit covers building the relations a query reads") {
  Fixture f;
  for (int i = 0; i < 300; ++i) {
    REQUIRE(f.objects->Write("kv", absl::StrCat("many/", i), "1").ok());
  }
  QueryLimits limits;
  limits.timeout = absl::Nanoseconds(1);
  auto r = f.Run("SELECT count(*) FROM kv", limits);
  CHECK_MESSAGE(absl::IsDeadlineExceeded(r.status()), r.status().ToString());
  CHECK_MESSAGE(absl::StrContains(r.status().message(), "(reading kv)"),
                r.status().ToString());
  // A query that reads none of it is not held up by it.
  limits.timeout = absl::Seconds(10);
  auto quick = f.Run("SELECT count(*) FROM members", limits);
  REQUIRE_MESSAGE(quick.ok(), quick.status().ToString());
  CHECK(quick->relations == std::vector<std::string>{"members"});
}

TEST_CASE("attacks are refused with a real status and change nothing") {
  Fixture f;
  const int64_t objects = f.Count("SELECT count(*) FROM objects");
  const int64_t tokens = f.Count("SELECT count(*) FROM join_tokens");
  struct Attack {
    const char* sql;
    absl::StatusCode code;
    const char* says;
  };
  const Attack attacks[] = {
      {"ATTACH DATABASE '/tmp/x' AS x", absl::StatusCode::kPermissionDenied,
       "ATTACH"},
      {"PRAGMA writable_schema=1", absl::StatusCode::kPermissionDenied,
       "PRAGMA"},
      {"PRAGMA table_info(kv)", absl::StatusCode::kPermissionDenied, "PRAGMA"},
      {"INSERT INTO kv(key) VALUES('x')", absl::StatusCode::kPermissionDenied,
       ""},
      {"UPDATE objects SET value='1'", absl::StatusCode::kPermissionDenied, ""},
      {"DELETE FROM objects", absl::StatusCode::kPermissionDenied, ""},
      {"DROP TABLE objects", absl::StatusCode::kPermissionDenied, ""},
      {"CREATE TABLE t(x)", absl::StatusCode::kPermissionDenied, ""},
      {"SELECT load_extension('x')", absl::StatusCode::kPermissionDenied,
       "load_extension"},
      {"SELECT readfile('/etc/passwd')", absl::StatusCode::kInvalidArgument,
       "readfile"},
      {"SELECT randomblob(1000000000)", absl::StatusCode::kPermissionDenied,
       "randomblob"},
      {"SELECT * FROM join_tokens", absl::StatusCode::kPermissionDenied,
       "join_tokens"},
      {"SELECT * FROM mesh", absl::StatusCode::kPermissionDenied, "mesh"},
      {"SELECT count(*) FROM main.join_tokens",
       absl::StatusCode::kPermissionDenied, "join_tokens"},
      {"SELECT count(*) FROM join_tokens", absl::StatusCode::kPermissionDenied,
       "join_tokens"},
      {"SELECT count(*) FROM sqlite_schema",
       absl::StatusCode::kPermissionDenied, "sqlite_"},
      {"WITH join_tokens AS (SELECT 1) SELECT count(*) FROM join_tokens",
       absl::StatusCode::kPermissionDenied, "join_tokens"},
      {"SELECT * FROM objects", absl::StatusCode::kPermissionDenied, "objects"},
      {"SELECT * FROM main.members", absl::StatusCode::kPermissionDenied,
       "members"},
      {"SELECT * FROM sqlite_schema", absl::StatusCode::kPermissionDenied,
       "sqlite_"},
      // A CTE named as a relation reports that name as SQLite's 4th
      // authorizer argument; it must not open the table behind it.
      {"WITH kv AS (SELECT * FROM main.join_tokens) SELECT * FROM kv",
       absl::StatusCode::kPermissionDenied, "join_tokens"},
      {"SELECT * FROM json_each('[1]')", absl::StatusCode::kPermissionDenied,
       ""},
      {"SELECT 1; DROP TABLE objects", absl::StatusCode::kInvalidArgument,
       "more than one statement"},
      {"SELECT 1; SELECT 2", absl::StatusCode::kInvalidArgument,
       "more than one statement"},
      {"BEGIN", absl::StatusCode::kPermissionDenied, ""},
      {"VACUUM INTO '/tmp/copy.db'", absl::StatusCode::kPermissionDenied, ""},
      {"", absl::StatusCode::kInvalidArgument, "empty"},
      {"SELEC 1", absl::StatusCode::kInvalidArgument, "syntax"},
  };
  for (const Attack& a : attacks) {
    auto r = f.Run(a.sql);
    CHECK_MESSAGE(r.status().code() == a.code, a.sql, " -> ",
                  r.status().ToString());
    CHECK_MESSAGE(r.status().message().find(a.says) != absl::string_view::npos,
                  a.sql, " -> ", r.status().ToString());
  }
  // SQLite stops reading at a NUL byte, so the text after one would go
  // unread (and unchecked): refused, not cut short.
  constexpr absl::string_view kNul("SELECT 1\0; DROP TABLE objects", 30);
  auto nul = f.Run(std::string(kNul));
  CHECK_MESSAGE(nul.status().code() == absl::StatusCode::kInvalidArgument,
                nul.status().ToString());
  CHECK(nul.status().message() == "sql: a NUL byte at byte 8");
  CHECK(f.Count("SELECT count(*) FROM objects") == objects);
  CHECK(f.Count("SELECT count(*) FROM join_tokens") == tokens);
  CHECK(f.Count("SELECT count(*) FROM sqlite_schema WHERE name='t'") == 0);
}

TEST_CASE("a query reads the last commit while a write is under way") {
  Fixture f;
  // The store's connection in the middle of a transaction, holding the
  // store's lock: a query needs neither, it reads the file's last commit.
  std::atomic<bool> done{false};
  absl::StatusOr<QueryResult> during = absl::UnknownError("not run");
  std::thread query;
  absl::Status wrote = f.store->InTransaction([&](Transaction& tx) {
    absl::Status s = tx.Execute(
        "INSERT INTO cells(name, spec, created_us) VALUES('c1', x'', 0)");
    if (!s.ok()) return s;
    query = std::thread([&] {
      during = f.Run("SELECT count(*) FROM cells");
      done = true;
    });
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    CHECK_MESSAGE(done, "the query waited for the writer");
    return absl::OkStatus();
  });
  query.join();
  REQUIRE(wrote.ok());
  REQUIRE_MESSAGE(during.ok(), during.status().ToString());
  CHECK(during->rows[0][0].integer == 0);  // not committed then
  auto after = f.Run("SELECT count(*) FROM cells");
  REQUIRE(after.ok());
  CHECK(after->rows[0][0].integer == 1);
}

TEST_CASE("a running query holds up neither writes nor checkpoints") {
  Fixture f;
  QueryLimits limits;
  limits.timeout = absl::Milliseconds(1500);
  std::atomic<bool> done{false};
  absl::Status ran;
  std::thread query([&] {
    ran = f.Run(
               "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 "
               "FROM c) SELECT count(*) FROM kv, c",
               limits)
              .status();
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  REQUIRE(!done);
  // Its read ended once its relations were built: a write commits, and a
  // checkpoint that copies the whole WAL and truncates it (which an open
  // read would make BUSY) goes through.
  CHECK(f.objects->Write("kv", "app/c", "3").ok());
  CHECK(f.store->Checkpoint().ok());
  CHECK(!done);
  query.join();
  CHECK(absl::IsDeadlineExceeded(ran));
  auto r = f.Run("SELECT count(*) FROM kv");
  REQUIRE(r.ok());
  CHECK(r->rows[0][0].integer == 3);
}

TEST_CASE("a query that runs forever stops at its time limit") {
  Fixture f;
  QueryLimits limits;
  limits.timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  auto r = f.Run(
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) "
      "SELECT count(*) FROM c",
      limits);
  CHECK_MESSAGE(absl::IsDeadlineExceeded(r.status()), r.status().ToString());
  CHECK(r.status().message().find("time limit") != absl::string_view::npos);
  CHECK(absl::Now() - start < absl::Seconds(5));
}

TEST_CASE("a cross join of millions of rows stops at the row limit") {
  Fixture f;
  QueryLimits limits;
  limits.max_rows = 1000;
  auto r = f.Run(
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT "
      "2000) SELECT a.x, b.x FROM c a, c b",
      limits);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  CHECK(r->rows.size() == 1000);
  CHECK(r->truncated);
}

TEST_CASE("a value past the size limit is RESOURCE_EXHAUSTED") {
  Fixture f;
  QueryLimits limits;
  limits.max_bytes = 1 << 20;
  // 2^21 bytes by doubling.
  auto r = f.Run(
      "WITH RECURSIVE s(x, n) AS (SELECT 'x', 0 UNION ALL SELECT x || x, n + 1 "
      "FROM s WHERE n < 21) SELECT max(length(x)) FROM s",
      limits);
  CHECK_MESSAGE(absl::IsResourceExhausted(r.status()), r.status().ToString());
}

TEST_CASE(
    "printf and format: SQLite's, with every width and precision bounded") {
  Fixture f;
  auto ok = f.Run(
      "SELECT printf('%05d|%-3s|%x|%.2f|%%|%.*c', 42, 'a', 255, 3.14159, 5, "
      "'x'), format('%s=%d', 'n', 7), printf('%s', NULL), printf(NULL)");
  REQUIRE_MESSAGE(ok.ok(), ok.status().ToString());
  CHECK(ok->rows[0][0].bytes == "00042|a  |ff|3.14|%|xxxxx");
  CHECK(ok->rows[0][1].bytes == "n=7");
  CHECK(ok->rows[0][2].bytes == "");
  CHECK(ok->rows[0][3].type == QueryValue::Type::kNull);
  // Per row, over a relation.
  auto rows = f.Run("SELECT printf('[%-6s]', key) FROM kv ORDER BY key");
  REQUIRE(rows.ok());
  REQUIRE(rows->rows.size() == 2);
  CHECK(rows->rows[1][0].bytes == "[app/b ]");
  // A %c of precision P is P appends in one step, which no time limit could
  // stop (21 s for 2147483647 with SQLite 3.40): refused before it runs, as
  // is any width or precision past 100000, literal or from an argument.
  for (const char* sql :
       {"SELECT printf('%.*c', 2147483647, 'x')",
        "SELECT printf('%.300000000c', 'x')",
        "SELECT format('%s %*d', 'a', -2000000, 1)",
        "SELECT count(*) FROM kv WHERE printf('%.*c', 100001, key) != ''"}) {
    CAPTURE(sql);
    const absl::Time start = absl::Now();
    auto r = f.Run(sql);
    CHECK_MESSAGE(absl::IsInvalidArgument(r.status()), r.status().ToString());
    CHECK(absl::StrContains(r.status().message(), "over the limit of 100000"));
    CHECK(absl::Now() - start < absl::Seconds(1));
  }
  auto edge = f.Run("SELECT length(printf('%.*c', 100000, 'x'))");
  REQUIRE_MESSAGE(edge.ok(), edge.status().ToString());
  CHECK(edge->rows[0][0].integer == 100000);
}

}  // namespace
}  // namespace mycel::store
