// query_fuzz: SQL from a user into `mycel query` (daemon/store/query.h),
// against a replica that holds secrets: a random canary is written into
// every place a query must not read (a replicated join token, the join
// token table, the mesh's peers and revocations, cell and executable
// specs, members' records, meta). The input is the SQL text.
//
// It found that SQLite reads a statement only up to a NUL byte, so that
// "SELECT 1\0; DROP TABLE objects" ran as "SELECT 1": RunQuery now refuses
// a NUL.
//
// Checked for every query: it fails only with the codes RunQuery documents;
// neither its rows, its column names nor its error carry the canary (as it
// is, or as hex()); every row has a value per column; the limits hold.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/store/objects.h"
#include "daemon/store/query.h"
#include "daemon/store/store.h"
#include "tests/fuzz/fuzz_target.h"

namespace mycel::store {
namespace {

constexpr QueryLimits kLimits = {
    .timeout = absl::Milliseconds(50), .max_rows = 50, .max_bytes = 64 << 10};

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  FUZZ_CHECK(fd >= 0, "/dev/urandom");
  FUZZ_CHECK(
      read(fd, raw.data(), raw.size()) == static_cast<ssize_t>(raw.size()),
      "/dev/urandom");
  close(fd);
  return absl::BytesToHexString(raw);
}

// Whether `needle` occurs in `hay`, by a plain loop: libFuzzer watches
// memcmp, memmem and strstr and would learn the canary from them (and then
// write it into a query, which proves nothing).
__attribute__((no_sanitize("coverage"))) bool Contains(
    const std::string& hay, const std::string& needle) {
  if (needle.size() > hay.size()) return false;
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    size_t j = 0;
    while (j < needle.size() && hay[i + j] == needle[j]) ++j;
    if (j == needle.size()) return true;
  }
  return false;
}

class World {
 public:
  World() : canary_(absl::StrCat("canary", RandomHex(16))) {
    hex_canary_ = absl::AsciiStrToUpper(absl::BytesToHexString(canary_));
    std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    dir += "/mycel-fuzz.XXXXXX";
    FUZZ_CHECK(mkdtemp(dir.data()) != nullptr, dir);
    dir_ = dir;
    auto s = Store::Open(dir_ + "/q.db", {.origin = "q0"});
    FUZZ_CHECK(s.ok(), s.status().ToString());
    store_ = *std::move(s);
    ObjectStore objects(store_.get());
    // What a query may read.
    for (const char* v : {"1", "\"text\"", "{\"a\":[1,2,{\"b\":null}]}"}) {
      Must(objects.Write("kv", absl::StrCat("app/", v), v).status());
    }
    Must(objects.Write("node.status", "q0", "{\"ready\":true}").status());
    // What it may not.
    Must(objects.Write("mesh.tokens", "t1", Json(canary_)).status());
    Must(store_->Execute(
        "INSERT INTO join_tokens(id, secret_hash, created_us, expires_us, "
        "uses_left) VALUES('tok', ?, 0, 0, 1)",
        [&](Stmt& st) { st.Bind(1, canary_); }));
    Must(store_->Execute(
        "INSERT INTO mesh(one, name, node, authority, joined_us) "
        "VALUES(1, ?, 'q0', 1, 0)",
        [&](Stmt& st) { st.Bind(1, canary_); }));
    Must(store_->Execute(
        "INSERT INTO mesh_peers(name, address, authority, serial, "
        "admitted_us) VALUES('p1', '127.0.0.1:1', 0, ?, 0)",
        [&](Stmt& st) { st.Bind(1, canary_); }));
    Must(store_->Execute("INSERT INTO revocations(one, list) VALUES(1, ?)",
                         [&](Stmt& st) { st.BindBlob(1, canary_); }));
    Must(
        store_->Execute("INSERT INTO cells(name, spec, created_us) "
                        "VALUES('c1', ?, 0)",
                        [&](Stmt& st) { st.BindBlob(1, canary_); }));
    Must(store_->Execute(
        "INSERT INTO executables(cell, name, spec, status) "
        "VALUES('c1', 'main', ?, ?)",
        [&](Stmt& st) { st.BindBlob(1, canary_).BindBlob(2, canary_); }));
    Must(
        store_->Execute("INSERT INTO members(name, state, incarnation, record, "
                        "state_since_us) VALUES('p1', 1, 1, ?, 0)",
                        [&](Stmt& st) { st.BindBlob(1, canary_); }));
    Must(store_->Execute("INSERT INTO meta(key, value) VALUES('secret', ?)",
                         [&](Stmt& st) { st.Bind(1, canary_); }));
  }
  ~World() {
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) {
      unlink((dir_ + "/q.db" + suffix).c_str());
    }
    rmdir(dir_.c_str());
  }

  Store* store() { return store_.get(); }
  // Whether `text` carries the canary, as it is or in hex.
  bool Leaks(const std::string& text) const {
    return Contains(text, canary_) || Contains(text, hex_canary_);
  }

 private:
  static std::string Json(const std::string& s) {
    return absl::StrCat("\"", s, "\"");
  }
  static void Must(const absl::Status& s) { FUZZ_CHECK(s.ok(), s.ToString()); }

  std::string canary_;
  std::string hex_canary_;
  std::string dir_;
  std::unique_ptr<Store> store_;
};

World& TheWorld() {
  static World* w = [] {
    static World world;
    return &world;
  }();
  return *w;
}

}  // namespace
}  // namespace mycel::store

namespace mycel::fuzz {

std::vector<std::string> Seeds() {
  return {
      "SELECT * FROM kv",
      "SELECT key, json_extract(value, '$.a[2].b') FROM kv WHERE key LIKE "
      "'app/%' ORDER BY revision DESC LIMIT 2",
      "SELECT name, status FROM nodes",
      "SELECT * FROM members JOIN cells ON 1 LEFT JOIN executables",
      "SELECT origin, count(*), max(seq) FROM changes GROUP BY origin",
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
      "SELECT count(*) FROM c",
      "SELECT group_concat(key, ',') OVER (ORDER BY key) FROM kv",
      "SELECT * FROM (SELECT value FROM kv) AS v, json_each(v.value)",
      "SELECT * FROM main.objects",
      "SELECT * FROM objects WHERE namespace = 'mesh.tokens'",
      "SELECT secret_hash FROM join_tokens",
      "SELECT * FROM temp.kv, main.meta",
      "SELECT sql FROM sqlite_master UNION SELECT sql FROM sqlite_temp_master",
      "SELECT * FROM pragma_table_info('join_tokens')",
      "PRAGMA query_only = 0",
      "ATTACH '/tmp/x.db' AS x",
      "SELECT load_extension('/tmp/x.so')",
      "SELECT readfile('/etc/passwd')",
      "INSERT INTO kv(key) VALUES ('x')",
      "SELECT 1; DELETE FROM kv",
      "CREATE TEMP VIEW v AS SELECT * FROM main.join_tokens",
      "SELECT hex(list) FROM revocations",
      "SELECT zeroblob(1000000000)",
      "SELECT printf('%.*c', 100000000, 'x')",
      "SELECT * FROM changes WHERE key LIKE 'mesh.tokens/%'",
      "SELECT (SELECT record FROM members), (SELECT spec FROM cells)",
      "SELECT * FROM kv NATURAL JOIN nodes NATURAL JOIN changes",
  };
}

}  // namespace mycel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mycel::store;
  World& w = TheWorld();
  const std::string sql(reinterpret_cast<const char*>(data), size);
  // A query that spells the canary out proves nothing (libFuzzer cannot
  // learn it: Contains hides it; this is for safety).
  if (w.Leaks(sql)) return 0;
  absl::StatusOr<QueryResult> r = RunQuery(w.store(), sql, kLimits);
  if (!r.ok()) {
    const absl::Status& s = r.status();
    FUZZ_CHECK(absl::IsInvalidArgument(s) || absl::IsPermissionDenied(s) ||
                   absl::IsDeadlineExceeded(s) || absl::IsResourceExhausted(s),
               s.ToString());
    FUZZ_CHECK(!w.Leaks(std::string(s.message())), "an error leaked");
    return 0;
  }
  for (const std::string& c : r->columns) {
    FUZZ_CHECK(!w.Leaks(c), "a column name leaked");
  }
  FUZZ_CHECK(static_cast<int64_t>(r->rows.size()) <= kLimits.max_rows,
             absl::StrCat(r->rows.size(), " rows"));
  for (const std::vector<QueryValue>& row : r->rows) {
    FUZZ_CHECK(
        row.size() == r->columns.size(),
        absl::StrCat(row.size(), " values, ", r->columns.size(), " columns"));
    for (const QueryValue& v : row) {
      FUZZ_CHECK(!w.Leaks(v.bytes), "a value leaked");
    }
  }
  return 0;
}
