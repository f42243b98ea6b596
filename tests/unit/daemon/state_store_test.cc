// The user key/value namespace (daemon/store/state_store.h): writes through
// ObjectStore, pages, revisions, and what a watch reads after a revision,
// including compaction.
#include "daemon/store/state_store.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"
#include "runtime/manual_clock.h"
#include "tests/testing/power_loss_vfs.h"
#include "tests/testing/process.h"

namespace mycel::store {
namespace {

struct Fixture {
  explicit Fixture(int64_t quota_bytes = 0)
      : clock(absl::FromUnixSeconds(1'800'000'000)) {
    auto s = Store::Open(dir.Sub("n1.db"),
                         Store::Options{.origin = "n1", .clock = &clock});
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    store = *std::move(s);
    objects = std::make_unique<ObjectStore>(store.get());
    state =
        std::make_unique<StateStore>(objects.get(), store.get(), quota_bytes);
  }
  ObjectChange Put(const std::string& key, const std::string& value) {
    auto c = state->Put(key, value, std::nullopt);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    return *c;
  }
  int64_t Revision() {
    auto r = state->Revision();
    REQUIRE(r.ok());
    return *r;
  }
  StateChanges Since(const std::string& prefix, int64_t after,
                     int limit = 100) {
    auto c = state->ChangesSince(prefix, after, limit);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    return *c;
  }

  testing::TempDir dir;
  ManualClock clock;
  std::unique_ptr<Store> store;
  std::unique_ptr<ObjectStore> objects;
  std::unique_ptr<StateStore> state;
};

TEST_CASE("a put is stamped, logged and read back in the kv namespace") {
  Fixture f;
  ObjectChange c = f.Put("app/a", R"({"x": 1})");
  CHECK(c.ns == "kv");
  CHECK(c.stamp.origin == "n1");
  CHECK(c.stamp.seq == 1);
  auto o = f.state->Get("app/a");
  REQUIRE(o.ok());
  CHECK(*o->value == R"({"x": 1})");
  // Through ObjectStore: in the change log, so it replicates.
  auto batch = f.objects->ReadChanges("n1", 0, 1 << 20);
  REQUIRE(batch.ok());
  REQUIRE(batch->changes.size() == 1);
  CHECK(batch->changes[0].key == "app/a");
  CHECK(absl::IsNotFound(f.state->Get("nope").status()));
}

TEST_CASE(
    "compare-and-set: the version read, none for absent, else "
    "FAILED_PRECONDITION naming the version held") {
  Fixture f;
  auto absent = f.state->Put("k", "1", ObjectVersion{});
  REQUIRE(absent.ok());
  auto again = f.state->Put("k", "2", ObjectVersion{});
  CHECK(absl::IsFailedPrecondition(again.status()));
  const ObjectVersion v1 = ObjectVersion::Of(absent->stamp);
  CHECK(again.status().message().find(v1.ToString()) !=
        absl::string_view::npos);
  // The origin and sequence alone do not name a change.
  auto no_time = f.state->Put("k", "3", ObjectVersion{"n1", 1});
  CHECK(absl::IsFailedPrecondition(no_time.status()));
  auto ok = f.state->Put("k", "3", v1);
  REQUIRE(ok.ok());
  auto stale = f.state->Put("k", "4", v1);
  CHECK(absl::IsFailedPrecondition(stale.status()));
  CHECK(*f.state->Get("k")->value == "3");
}

TEST_CASE(
    "a version read before a power loss does not match the change that "
    "reuses its sequence number") {
  testing::RegisterPowerLossVfs();
  testing::TempDir dir;
  ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  const std::string path = dir.Sub("p.db");
  // Durability `normal`: a put is answered before its commit is synced.
  auto open = [&] {
    auto s = Store::Open(path, Store::Options{.origin = "n1",
                                              .clock = &clock,
                                              .vfs = testing::kPowerLossVfs});
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    return *std::move(s);
  };
  std::unique_ptr<Store> store = open();
  auto objects = std::make_unique<ObjectStore>(store.get());
  auto state = std::make_unique<StateStore>(objects.get(), store.get());
  REQUIRE(state->Put("k", "1", std::nullopt).ok());
  REQUIRE(store->Sync().ok());
  clock.Advance(absl::Milliseconds(5));
  // A client reads this version, and the power goes before a sync.
  auto lost = state->Put("k", "2", std::nullopt);
  REQUIRE(lost.ok());
  const ObjectVersion read = ObjectVersion::Of(lost->stamp);
  state.reset();
  objects.reset();
  (void)store.release();  // as a crash: not closed, so not synced
  REQUIRE(testing::SimulatePowerLoss(path).ok());

  clock.Advance(absl::Seconds(30));
  store = open();
  objects = std::make_unique<ObjectStore>(store.get());
  state = std::make_unique<StateStore>(objects.get(), store.get());
  CHECK(*state->Get("k")->value == "1");
  // Another writer's change takes the lost one's number...
  auto other = state->Put("k", "3", std::nullopt);
  REQUIRE(other.ok());
  CHECK(other->stamp.seq == read.seq);
  CHECK(other->stamp.origin == read.origin);
  // ...but not its version: the client's compare-and-set is refused, and
  // names both.
  auto cas = state->Put("k", "4", read);
  CHECK(absl::IsFailedPrecondition(cas.status()));
  CHECK(cas.status().message().find(read.ToString()) !=
        absl::string_view::npos);
  CHECK(*state->Get("k")->value == "3");
}

TEST_CASE("past the quota puts are refused; deletes go on and make room") {
  // Without a bound, anyone the `write` rule admits could fill the disk of
  // every node of the mesh, a key at a time.
  int64_t empty = 0;
  {
    Fixture probe;
    empty = *probe.store->UsedBytes();
  }
  const int64_t quota = empty + (256 << 10);
  Fixture f(quota);
  const std::string value = absl::StrCat("\"", std::string(4000, 'v'), "\"");
  std::vector<std::string> acknowledged;
  absl::Status refused;
  for (int i = 0; i < 1000 && refused.ok(); ++i) {
    const std::string key = absl::StrCat("fill/", i);
    absl::StatusOr<ObjectChange> c = f.state->Put(key, value, std::nullopt);
    if (c.ok()) {
      acknowledged.push_back(key);
    } else {
      refused = c.status();
    }
    // The measure is at most 100 ms old: let it catch up now and then.
    if (i % 16 == 15) absl::SleepFor(absl::Milliseconds(101));
  }
  REQUIRE(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StartsWith(refused.message(),
                         "state_quota: the state database holds "));
  CHECK(absl::StrContains(refused.message(), "delete keys"));
  CHECK(f.state->refused_over_quota() == 1);
  // The database went past the quota by what fits in 100 ms at most.
  const int64_t used = *f.store->UsedBytes();
  CHECK(used >= quota);
  CHECK(used < quota + (256 << 10));
  // Every acknowledged put is there, and nothing else.
  // A put holds its value twice, in objects and in the change log: about
  // 8 KB each here, so about 32 of them fill 256 KB.
  REQUIRE(acknowledged.size() >= 16);
  for (const std::string& key : acknowledged) {
    CAPTURE(key);
    CHECK(f.state->Get(key).ok());
  }
  CHECK(absl::IsNotFound(
      f.state->Get(absl::StrCat("fill/", acknowledged.size())).status()));
  // A put refused stays refused, asynchronously too, answered at once.
  absl::Status async;
  f.state->PutAsync(
      "more", value, std::nullopt,
      [&](absl::StatusOr<ObjectChange> c) { async = c.status(); });
  CHECK(async.code() == absl::StatusCode::kResourceExhausted);
  // A delete of a key that holds no value would only add a tombstone, which
  // every node keeps until it is collected: refused too.
  absl::StatusOr<ObjectChange> no_value = f.state->Delete("never/written");
  CHECK(no_value.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(no_value.status().message(),
                          "deletes of keys that hold no value here"));
  absl::Status async_delete;
  f.state->DeleteAsync("never/written", [&](absl::StatusOr<ObjectChange> c) {
    async_delete = c.status();
  });
  CHECK(async_delete.code() == absl::StatusCode::kResourceExhausted);
  CHECK(f.state->refused_over_quota() == 4);
  // Deletes that free a value are taken; once collected, their space is
  // used again.
  for (const std::string& key : acknowledged) {
    REQUIRE(f.state->Delete(key).ok());
  }
  // Deleted once, a key holds no value: deleting it again is refused.
  CHECK(f.state->Delete(acknowledged[0]).status().code() ==
        absl::StatusCode::kResourceExhausted);
  auto gc = f.objects->CollectGarbage({{"n1", 1 << 20}}, 0);
  REQUIRE(gc.ok());
  CHECK(gc->tombstones == static_cast<int64_t>(acknowledged.size()));
  absl::SleepFor(absl::Milliseconds(101));
  CHECK(*f.store->UsedBytes() < quota);
  CHECK(f.state->Put("again", value, std::nullopt).ok());
}

TEST_CASE("a version is origin:seq@hlc, and parsing names the field") {
  const ObjectVersion v{"node-a", 57, 0x19ac3b2f4e0001};
  CHECK(v.ToString() == "node-a:57@19ac3b2f4e0001");
  auto back = ObjectVersion::Parse(v.ToString(), "if_version");
  REQUIRE(back.ok());
  CHECK(*back == v);
  // An origin may itself hold ':'; the last one before '@' splits.
  auto colons = ObjectVersion::Parse("a:b:3@ff", "if_version");
  REQUIRE(colons.ok());
  CHECK(colons->origin == "a:b");
  CHECK(colons->seq == 3);
  CHECK(colons->hlc == 0xff);
  CHECK(ObjectVersion::Parse("none", "if_version")->seq == 0);
  CHECK(ObjectVersion{}.ToString() == "none");
  for (const char* bad :
       {"", "x", "a:1", ":1@ff", "a:0@ff", "a:-1@ff", "a:1@", "a:1@xyz", "a@ff",
        "a:1@ff:2", "a:1@ffffffffffffffffff", "a:99999999999999999999@1"}) {
    CAPTURE(bad);
    auto p = ObjectVersion::Parse(bad, "if_version");
    CHECK(absl::IsInvalidArgument(p.status()));
    CHECK(absl::StartsWith(p.status().message(), "if_version: want "));
  }
}

TEST_CASE("List pages by key with a prefix and carries the revision") {
  Fixture f;
  for (const char* k : {"a/1", "a/2", "a/3", "b/1"}) f.Put(k, "true");
  REQUIRE(f.state->Delete("a/2").ok());
  auto p1 = f.state->List("a/", "", 1);
  REQUIRE(p1.ok());
  REQUIRE(p1->objects.size() == 1);
  CHECK(p1->objects[0].key == "a/1");
  CHECK(p1->next_after == "a/1");
  CHECK(p1->revision == f.Revision());
  auto p2 = f.state->List("a/", p1->next_after, 1);
  REQUIRE(p2.ok());
  REQUIRE(p2->objects.size() == 1);
  CHECK(p2->objects[0].key == "a/3");  // a/2 is deleted
  auto p3 = f.state->List("a/", p2->next_after, 1);
  REQUIRE(p3.ok());
  CHECK(p3->objects.empty());
  CHECK(p3->next_after.empty());
}

TEST_CASE("revisions grow with every change and a key's changes coalesce") {
  Fixture f;
  CHECK(f.Revision() == 0);
  f.Put("a", "1");
  f.Put("b", "1");
  const int64_t r2 = f.Revision();
  CHECK(r2 == 2);
  f.Put("a", "2");
  f.Put("a", "3");
  REQUIRE(f.state->Delete("b").ok());
  CHECK(f.Revision() == 5);
  StateChanges c = f.Since("", r2);
  // a changed twice: one entry, its latest value.
  REQUIRE(c.changes.size() == 2);
  CHECK(c.changes[0].key == "a");
  CHECK(c.changes[0].revision == 4);
  CHECK(*c.changes[0].object->value == "3");
  CHECK(c.changes[1].key == "b");
  CHECK(!c.changes[1].object->value.has_value());  // deleted: tombstone
  CHECK(c.revision == 5);
  // A prefix filters, and the reader still moves to the latest revision.
  StateChanges only_b = f.Since("b", 0);
  REQUIRE(only_b.changes.size() == 1);
  CHECK(only_b.revision == 5);
  // A limit stops at the last change returned.
  StateChanges one = f.Since("", 0, 1);
  REQUIRE(one.changes.size() == 1);
  CHECK(one.revision == one.changes[0].revision);
}

TEST_CASE("changes received from another origin get revisions too") {
  Fixture f;
  ObjectChange c;
  c.stamp = {"n2", 1, 1};
  c.ns = "kv";
  c.key = "remote";
  c.value = "\"hi\"";
  auto r = f.objects->ApplyRemote(c, "n2");
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  StateChanges s = f.Since("", 0);
  REQUIRE(s.changes.size() == 1);
  CHECK(s.changes[0].key == "remote");
  CHECK(s.changes[0].object->stamp.origin == "n2");
  // Another namespace is not the user's.
  REQUIRE(f.objects->Write("other", "x", "1").ok());
  CHECK(f.Since("", s.revision).changes.empty());
}

TEST_CASE("a resume from below a collected tombstone is OUT_OF_RANGE") {
  Fixture f;
  f.Put("gone", "1");
  const int64_t before = f.Revision();
  REQUIRE(f.state->Delete("gone").ok());
  f.Put("stays", "1");
  const int64_t after_delete = f.Revision();
  // Every member has seen everything: the tombstone goes.
  auto gc = f.objects->CollectGarbage({{"n1", 100}}, 0);
  REQUIRE(gc.ok());
  CHECK(gc->tombstones == 1);
  auto stale = f.state->ChangesSince("", before, 100);
  CHECK(absl::IsOutOfRange(stale.status()));
  CHECK(stale.status().message().find("compacted") != absl::string_view::npos);
  // From at or after the collected change, nothing is missing.
  CHECK(f.state->ChangesSince("", after_delete, 100).ok());
  CHECK(f.Revision() == after_delete);
  // A revision this node never gave.
  auto ahead = f.state->ChangesSince("", after_delete + 10, 100);
  CHECK(absl::IsOutOfRange(ahead.status()));
}

TEST_CASE("revisions survive a restart and are not reused") {
  Fixture f;
  f.Put("a", "1");
  f.Put("a", "2");
  const int64_t r = f.Revision();
  f.state.reset();
  f.objects.reset();
  f.store.reset();
  auto s = Store::Open(f.dir.Sub("n1.db"),
                       Store::Options{.origin = "n1", .clock = &f.clock});
  REQUIRE(s.ok());
  f.store = *std::move(s);
  f.objects = std::make_unique<ObjectStore>(f.store.get());
  f.state = std::make_unique<StateStore>(f.objects.get(), f.store.get());
  CHECK(f.Revision() == r);
  f.Put("a", "3");
  CHECK(f.Revision() == r + 1);
}

TEST_CASE("--durability full is synchronous=FULL, normal is NORMAL") {
  testing::TempDir dir;
  for (bool full : {false, true}) {
    auto s = Store::Open(dir.Sub(full ? "full.db" : "normal.db"),
                         Store::Options{.synchronous_full = full});
    REQUIRE(s.ok());
    int64_t mode = -1;
    REQUIRE((*s)->Query(
                    "PRAGMA synchronous", [](Stmt&) {},
                    [&](const Stmt& st) {
                      mode = st.ColumnInt(0);
                      return absl::OkStatus();
                    })
                .ok());
    CHECK(mode == (full ? 2 : 1));  // FULL is 2, NORMAL 1
  }
}

}  // namespace
}  // namespace mycel::store
