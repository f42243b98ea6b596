// The store half of replication (daemon/store/objects.h): local writes,
// changes from other origins, the merge rule, ownership, clock skew, the
// log a peer reads, garbage collection, snapshots and restarts.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"
#include "runtime/manual_clock.h"
#include "tests/testing/process.h"

namespace mycel::store {
namespace {

constexpr absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// A node: its store and objects on a clock the test moves.
struct Node {
  Node(const testing::TempDir& dir, const std::string& name, ManualClock* clock,
       ObjectStore::Options options = {})
      : path(dir.Sub(name + ".db")),
        name(name),
        clock(clock),
        options(options) {
    Open();
  }
  void Open() {
    objects.reset();
    store.reset();
    auto s = Store::Open(
        path, Store::Options{.origin = origin.empty() ? name : origin,
                             .clock = clock});
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    store = *std::move(s);
    objects = std::make_unique<ObjectStore>(store.get(), options);
  }
  ObjectChange Put(const std::string& ns, const std::string& key,
                   const std::string& value) {
    auto c = objects->Write(ns, key, value);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    return *c;
  }
  ObjectChange Del(const std::string& ns, const std::string& key) {
    auto c = objects->Write(ns, key, std::nullopt);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    return *c;
  }
  std::optional<std::string> Value(const std::string& ns,
                                   const std::string& key) {
    auto o = objects->Get(ns, key);
    if (absl::IsNotFound(o.status())) return std::nullopt;
    REQUIRE_MESSAGE(o.ok(), o.status().ToString());
    return o->value;
  }
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

  std::string path;
  std::string name;
  std::string origin;  // the store's, when not `name`
  ManualClock* clock;
  ObjectStore::Options options;
  std::unique_ptr<Store> store;
  std::unique_ptr<ObjectStore> objects;
};

ObjectChange Change(const std::string& origin, int64_t seq, HlcTime hlc,
                    const std::string& key, std::optional<std::string> value,
                    const std::string& ns = "kv") {
  return {.stamp = {.origin = origin, .seq = seq, .hlc = hlc},
          .ns = ns,
          .key = key,
          .value = std::move(value)};
}

HlcTime At(absl::Time t, uint32_t counter = 0) {
  return MakeHlc(absl::ToUnixMillis(t), counter);
}

TEST_CASE("local writes: put, get, list, delete as a tombstone") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  ObjectChange c1 = a.Put("kv", "app/x", "1");
  CHECK(c1.stamp.origin == "a");
  CHECK(c1.stamp.seq == 1);
  CHECK(HlcMillis(c1.stamp.hlc) == absl::ToUnixMillis(kStart));
  a.Put("kv", "app/y", "2");
  a.Put("kv", "other", "3");
  CHECK(a.Value("kv", "app/x") == "1");
  auto listed = a.objects->List("kv", "app/");
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 2);
  CHECK((*listed)[0].key == "app/x");
  CHECK((*listed)[1].key == "app/y");

  ObjectChange gone = a.Del("kv", "app/x");
  CHECK(gone.stamp.seq == 4);
  CHECK_FALSE(gone.value.has_value());
  CHECK(a.objects->Get("kv", "app/x").status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(a.objects->List("kv", "app/")->size() == 1);
  // The tombstone stays, stamped, until collected.
  CHECK(a.Count("SELECT count(*) FROM objects WHERE value IS NULL") == 1);
  CHECK(a.Count("SELECT count(*) FROM change_log") == 4);
  auto v = a.objects->Versions();
  REQUIRE(v.ok());
  CHECK(*v == VersionVector{{"a", 4}});
}

TEST_CASE("a put conditional on the version read is a compare-and-set") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  // Absent: seq 0 expects no live value.
  auto created = a.objects->Write("kv", "k", "v1", ObjectVersion{});
  REQUIRE(created.ok());
  auto again = a.objects->Write("kv", "k", "v1b", ObjectVersion{});
  CHECK(again.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(again.status().message() ==
                    absl::StrCat("object kv/k is at version ",
                                 ObjectVersion::Of(created->stamp).ToString(),
                                 ", not the expected none (absent)"),
                again.status().ToString());

  auto read = a.objects->Get("kv", "k");
  REQUIRE(read.ok());
  const ObjectVersion seen = ObjectVersion::Of(read->stamp);
  a.Put("kv", "k", "someone else");  // moves the version on
  auto stale = a.objects->Write("kv", "k", "v2", seen);
  CHECK(stale.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(a.Value("kv", "k") == "someone else");
  // A refused write takes no sequence number.
  auto fresh = a.objects->Get("kv", "k");
  auto ok = a.objects->Write("kv", "k", "v2", ObjectVersion::Of(fresh->stamp));
  REQUIRE(ok.ok());
  CHECK(ok->stamp.seq == 3);
  CHECK(a.Value("kv", "k") == "v2");
}

TEST_CASE("bad input is INVALID_ARGUMENT naming the field") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock, {.max_value_bytes = 16});
  auto check = [&](const std::string& ns, const std::string& key,
                   const std::string& value, const std::string& field) {
    auto r = a.objects->Write(ns, key, value);
    CHECK_MESSAGE(r.status().code() == absl::StatusCode::kInvalidArgument,
                  r.status().ToString());
    CHECK_MESSAGE(
        r.status().message().substr(0, field.size() + 1) == field + ":",
        r.status().ToString());
  };
  check("", "k", "v", "namespace");
  check("Big", "k", "v", "namespace");
  check("a/b", "k", "v", "namespace");
  check("kv", "", "v", "key");
  check("kv", std::string("a\0b", 3), "v", "key");
  check("kv", std::string(2000, 'k'), "v", "key");
  check("kv", "k", std::string(17, 'v'), "value");
  check("node.status", "/x", "v", "key");
  CHECK(a.objects->Write("kv", "k", std::string(16, 'v')).ok());
  // Nothing refused took a sequence number.
  CHECK(a.objects->Versions()->at("a") == 1);
  // The same limits hold for what arrives from peers.
  auto big = a.objects->ApplyRemote(
      Change("b", 1, At(kStart), "k", std::string(17, 'v')), "b");
  CHECK(big.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(a.objects->Versions()->count("b") == 0);
}

TEST_CASE("a change from another origin must be the next of its sequence") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  auto gap = a.objects->ApplyRemote(Change("b", 2, At(kStart), "k", "2"), "b");
  CHECK(gap.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(gap.status().message().find("not the next of its origin (1)") !=
                    absl::string_view::npos,
                gap.status().ToString());
  CHECK_FALSE(a.Value("kv", "k").has_value());
  CHECK(a.Count("SELECT count(*) FROM change_log") == 0);

  auto one = a.objects->ApplyRemote(Change("b", 1, At(kStart), "k", "1"), "b");
  REQUIRE(one.ok());
  CHECK(*one == ApplyResult::kApplied);
  auto two = a.objects->ApplyRemote(Change("b", 2, At(kStart, 1), "k", "2"),
                                    "c");  // relayed by c
  REQUIRE(two.ok());
  CHECK(a.Value("kv", "k") == "2");
  auto dup = a.objects->ApplyRemote(Change("b", 1, At(kStart), "k", "1"), "b");
  REQUIRE(dup.ok());
  CHECK(*dup == ApplyResult::kDuplicate);
  CHECK(a.Value("kv", "k") == "2");
  CHECK(a.objects->Versions()->at("b") == 2);
  // The received change is logged with its own stamp.
  CHECK(a.Count("SELECT count(*) FROM change_log WHERE origin='b'") == 2);
}

TEST_CASE("last writer wins on (hlc, origin), in either order") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  const ObjectChange older = Change("b", 1, At(kStart, 1), "k", "from b");
  const ObjectChange newer = Change("c", 1, At(kStart, 2), "k", "from c");
  // Same time: the higher origin wins.
  const ObjectChange tie_low = Change("b", 2, At(kStart, 5), "t", "b");
  const ObjectChange tie_high = Change("c", 2, At(kStart, 5), "t", "c");
  for (bool forward : {true, false}) {
    Node n(dir, forward ? "fwd" : "rev", &clock);
    std::vector<ObjectChange> order = {older, newer, tie_low, tie_high};
    if (!forward) order = {newer, older, tie_high, tie_low};
    std::vector<ApplyResult> results;
    for (const ObjectChange& c : order) {
      auto r = n.objects->ApplyRemote(c, c.stamp.origin);
      REQUIRE_MESSAGE(r.ok(), r.status().ToString());
      results.push_back(*r);
    }
    CHECK(n.Value("kv", "k") == "from c");
    CHECK(n.Value("kv", "t") == "c");
    // The losers are logged, so the vector advances past them.
    CHECK(results[1] == (forward ? ApplyResult::kApplied : ApplyResult::kLost));
    CHECK(*n.objects->Versions() == VersionVector{{"b", 2}, {"c", 2}});
    CHECK(n.Count("SELECT count(*) FROM change_log") == 4);
  }
  // A local write after receiving is later than all it received.
  Node a(dir, "a", &clock);
  REQUIRE(a.objects->ApplyRemote(newer, "c").ok());
  ObjectChange mine = a.Put("kv", "k", "mine");
  CHECK(mine.stamp.hlc > newer.stamp.hlc);
  CHECK(a.Value("kv", "k") == "mine");
}

TEST_CASE("the remote listener hears changes that won their key, only") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node n(dir, "n", &clock);
  std::vector<ObjectChange> heard;
  n.objects->SetRemoteChangeListener(
      [&](const ObjectChange& c) { heard.push_back(c); });
  const ObjectChange newer = Change("c", 1, At(kStart, 2), "k", "from c");
  const ObjectChange older = Change("b", 1, At(kStart, 1), "k", "from b");
  REQUIRE(n.objects->ApplyRemote(newer, "c").ok());
  REQUIRE(*n.objects->ApplyRemote(older, "b") == ApplyResult::kLost);
  REQUIRE(*n.objects->ApplyRemote(newer, "c") == ApplyResult::kDuplicate);
  // Refused: not heard.
  CHECK_FALSE(
      n.objects->ApplyRemote(Change("c", 5, At(kStart, 3), "k", "gap"), "c")
          .ok());
  n.Put("kv", "local", "v");  // a local write is the other listener's
  REQUIRE(heard.size() == 1);
  CHECK(heard[0] == newer);
  // A snapshot row that replaces ours is heard; one that loses is not.
  Node a(dir, "a", &clock);
  a.Put("kv", "s", "from a");
  clock.Advance(absl::Seconds(1));
  n.Put("kv", "local", "newer here");
  auto chunk = a.objects->ReadSnapshot({}, 1 << 20);
  REQUIRE(chunk.ok());
  heard.clear();
  REQUIRE(n.objects->ApplySnapshot(*chunk, "a").ok());
  REQUIRE(heard.size() == 1);
  CHECK(heard[0].key == "s");
  CHECK(heard[0].value == "from a");
  CHECK(heard[0].stamp.origin == "a");
}

TEST_CASE("a node-owned object changes only by its owner") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  CHECK(*ObjectStore::OwnerOf("node.status", "b/disk") == "b");
  CHECK(ObjectStore::OwnerOf("kv", "b/disk")->empty());
  // Locally: a may write its own, not b's.
  CHECK(a.objects->Write("node.status", "a", "up").ok());
  auto theirs = a.objects->Write("node.status", "b", "down");
  CHECK(theirs.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(theirs.status().message() ==
        "object node.status/b belongs to node b; only it may change it, not "
        "a");
  // From peers: a change to b's object by origin c is refused, whoever
  // sends it, and leaves no trace; b's own change is taken, relayed too.
  auto forged = a.objects->ApplyRemote(
      Change("c", 1, At(kStart), "b", "down", "node.status"), "c");
  CHECK(forged.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK_MESSAGE(forged.status().message().find("belongs to node b") !=
                    absl::string_view::npos,
                forged.status().ToString());
  CHECK(a.objects->Versions()->count("c") == 0);
  CHECK(a.Count("SELECT count(*) FROM change_log WHERE origin='c'") == 0);
  auto own = a.objects->ApplyRemote(
      Change("b", 1, At(kStart), "b", "up", "node.status"), "c");
  REQUIRE(own.ok());
  CHECK(a.Value("node.status", "b") == "up");
  CHECK(a.objects->Get("node.status", "b")->owner == "b");
}

TEST_CASE(
    "a change of this node's own that its database lost is taken back, and "
    "the next write goes past it") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  a.Put("kv", "x", "1");  // a:1
  // A peer kept a:2 and a:3, which this database no longer holds (it was
  // restored from a copy taken after a:1).
  auto gap = a.objects->ApplyRemote(Change("a", 3, At(kStart), "z", "3"), "b");
  CHECK(gap.status().code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(
      a.objects->ApplyRemote(Change("a", 2, At(kStart), "y", "2"), "b").ok());
  REQUIRE(
      a.objects->ApplyRemote(Change("a", 3, At(kStart), "z", "3"), "b").ok());
  CHECK(a.Value("kv", "z") == "3");
  CHECK(a.objects->Versions()->at("a") == 3);
  CHECK(a.Put("kv", "w", "4").stamp.seq == 4);
  // Held already: a duplicate.
  CHECK(*a.objects->ApplyRemote(Change("a", 2, At(kStart), "y", "2"), "b") ==
        ApplyResult::kDuplicate);
  a.Open();
  CHECK(a.Put("kv", "v", "5").stamp.seq == 5);
}

TEST_CASE("a node's writes wait while held, and go on when released") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  a.objects->HoldLocalWrites(absl::Seconds(30));
  CHECK(a.store->holding_local_writes());
  std::atomic<int> answered{0};
  std::atomic<int64_t> seq{0};
  a.objects->WriteAsync("kv", "k", "1", std::nullopt,
                        [&](absl::StatusOr<ObjectChange> c) {
                          if (c.ok()) seq = c->stamp.seq;
                          ++answered;
                        });
  // A change from a peer is not held, and the one of this node's own it
  // takes back moves the write's number on.
  REQUIRE(
      a.objects->ApplyRemote(Change("a", 1, At(kStart), "x", "0"), "b").ok());
  absl::SleepFor(absl::Milliseconds(200));
  CHECK(answered == 0);
  CHECK_FALSE(a.Value("kv", "k").has_value());
  a.objects->ReleaseLocalWrites();
  for (int i = 0; i < 500 && answered == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  CHECK(answered == 1);
  CHECK(seq == 2);
  CHECK(a.Value("kv", "k") == "1");
  // A hold runs out by itself.
  a.objects->HoldLocalWrites(absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  CHECK(a.Put("kv", "k", "2").stamp.seq == 3);
  CHECK(absl::Now() - start >= absl::Milliseconds(250));
  CHECK_FALSE(a.store->holding_local_writes());
  // A store closed while holding answers what it held, unwritten.
  a.objects->HoldLocalWrites(absl::Seconds(30));
  std::atomic<bool> unavailable{false};
  a.objects->WriteAsync("kv", "k", "3", std::nullopt,
                        [&](absl::StatusOr<ObjectChange> c) {
                          unavailable = absl::IsUnavailable(c.status());
                        });
  a.Open();
  CHECK(unavailable);
  CHECK(a.Value("kv", "k") == "2");
}

TEST_CASE("a change stamped too far in the future is refused") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock, {.max_offset = absl::Milliseconds(500)});
  auto far = a.objects->ApplyRemote(
      Change("b", 1, At(kStart + absl::Seconds(10)), "k", "future"), "b");
  CHECK(far.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(
      far.status().message().find("clock skew") != absl::string_view::npos,
      far.status().ToString());
  CHECK_MESSAGE(far.status().message().find("change b:1 sent by b") !=
                    absl::string_view::npos,
                far.status().ToString());
  CHECK_FALSE(a.Value("kv", "k").has_value());
  CHECK(a.objects->Versions()->count("b") == 0);
  // Within the offset it is taken, and this node's clock moves past it.
  const HlcTime near = At(kStart + absl::Milliseconds(400));
  REQUIRE(a.objects->ApplyRemote(Change("b", 1, near, "k", "near"), "b").ok());
  CHECK(a.Put("kv", "j", "x").stamp.hlc > near);
  // Once the wall clock catches up, the refused one is accepted.
  clock.Advance(absl::Seconds(10));
  CHECK(a.objects
            ->ApplyRemote(
                Change("b", 2, At(kStart + absl::Seconds(10)), "k", "future"),
                "b")
            .ok());
  CHECK(a.Value("kv", "k") == "future");
}

TEST_CASE("a peer reads an origin's changes in chunks of bounded bytes") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  for (int i = 0; i < 10; ++i) {
    a.Put("kv", "k" + std::to_string(i), std::string(100, 'x'));
  }
  a.Del("kv", "k3");
  int64_t after = 0;
  int chunks = 0;
  std::vector<int64_t> seqs;
  for (;;) {
    auto batch = a.objects->ReadChanges("a", after, 300);
    REQUIRE(batch.ok());
    REQUIRE_FALSE(batch->changes.empty());
    CHECK(batch->bytes <= 300);
    ++chunks;
    for (const ObjectChange& c : batch->changes) seqs.push_back(c.stamp.seq);
    after = batch->changes.back().stamp.seq;
    if (!batch->more) break;
  }
  // 2 puts of 129 bytes fit in 300; the last two with the delete (29).
  CHECK(chunks == 5);
  CHECK(seqs == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto last = a.objects->ReadChanges("a", 10, 1);
  REQUIRE(last.ok());
  REQUIRE(last->changes.size() == 1);
  CHECK(last->changes[0].key == "k3");
  CHECK_FALSE(last->changes[0].value.has_value());
  CHECK(a.objects->ReadChanges("a", 11, 300)->changes.empty());
  CHECK(a.objects->ReadChanges("nobody", 0, 300)->changes.empty());
}

TEST_CASE("tombstones go once every live member saw them, or when old") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  a.Put("kv", "x", "1");  // 1
  a.Del("kv", "x");       // 2
  a.Put("kv", "y", "1");  // 3
  a.Del("kv", "y");       // 4
  a.Put("kv", "z", "1");  // 5
  const HlcTime long_ago = At(kStart - absl::Hours(1));

  // Nothing known of the members (an empty vector): nothing goes.
  auto none = a.objects->CollectGarbage({}, long_ago);
  REQUIRE(none.ok());
  CHECK(none->tombstones == 0);
  CHECK(none->log_changes == 0);
  CHECK(a.objects->ReadChanges("a", 0, 1 << 20)->changes.size() == 5);

  // Everyone has seen up to 1: its log entry goes, no tombstone yet.
  auto first = a.objects->CollectGarbage({{"a", 1}}, long_ago);
  REQUIRE(first.ok());
  CHECK(first->tombstones == 0);
  CHECK(first->log_changes == 1);
  CHECK(a.Count("SELECT count(*) FROM objects WHERE value IS NULL") == 2);

  // Everyone has seen up to 2: the first tombstone and its log go.
  auto some = a.objects->CollectGarbage({{"a", 2}}, long_ago);
  REQUIRE(some.ok());
  CHECK(some->tombstones == 1);
  CHECK(some->log_changes == 1);
  CHECK(a.Count("SELECT count(*) FROM objects WHERE value IS NULL") == 1);
  CHECK(a.objects->Floors()->at("a") == 2);
  // A peer behind the floor is told to resync in full.
  auto behind = a.objects->ReadChanges("a", 1, 1 << 20);
  CHECK(behind.status().code() == absl::StatusCode::kOutOfRange);
  CHECK_MESSAGE(behind.status().message().find("resync in full") !=
                    absl::string_view::npos,
                behind.status().ToString());
  CHECK(a.objects->ReadChanges("a", 2, 1 << 20)->changes.size() == 3);

  // By age: a day later, everything old goes but the last log entry.
  clock.Advance(absl::Hours(24));
  auto old = a.objects->CollectGarbage({}, At(clock.Now() - absl::Hours(1)));
  REQUIRE(old.ok());
  CHECK(old->tombstones == 1);
  CHECK(old->log_changes == 2);
  CHECK(a.Count("SELECT count(*) FROM objects WHERE value IS NULL") == 0);
  CHECK(a.Count("SELECT count(*) FROM change_log") == 1);
  CHECK(a.objects->Floors()->at("a") == 4);
  CHECK(a.Value("kv", "z") == "1");  // live objects stay
}

TEST_CASE("after a restart the sequence goes on and is never reused") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  a.Put("kv", "x", "1");
  a.Put("kv", "x", "2");
  a.Del("kv", "x");
  REQUIRE(a.objects->CollectGarbage({{"a", 3}}, 0).ok());
  a.Open();  // as after kill -9: nothing but the database survives
  ObjectChange next = a.Put("kv", "y", "1");
  CHECK(next.stamp.seq == 4);
  CHECK(a.objects->Versions()->at("a") == 4);
  // Even when every log entry of it was collected but the last one.
  REQUIRE(
      a.objects->CollectGarbage({{"a", 4}}, At(kStart + absl::Hours(1))).ok());
  CHECK(a.Count("SELECT count(*) FROM change_log") == 1);
  a.Open();
  CHECK(a.Put("kv", "z", "1").stamp.seq == 5);
}

TEST_CASE("a full resync brings a replica up without resurrecting deletes") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  Node r(dir, "r", &clock);
  // r received a's put of k, then went away.
  ObjectChange put = a.Put("kv", "k", "1");
  REQUIRE(r.objects->ApplyRemote(put, "a").ok());
  ObjectChange mine = r.Put("kv", "mine", "written while away");
  // a deletes k, writes more, and collects the tombstone by age.
  a.Del("kv", "k");
  for (int i = 0; i < 20; ++i) a.Put("kv", "n" + std::to_string(i), "v");
  clock.Advance(absl::Hours(100));
  REQUIRE(
      a.objects->CollectGarbage({}, At(clock.Now() - absl::Hours(72))).ok());
  auto behind = a.objects->ReadChanges("a", 1, 1 << 20);
  CHECK(behind.status().code() == absl::StatusCode::kOutOfRange);

  // The snapshot, in small chunks.
  std::pair<std::string, std::string> after;
  VersionVector base;
  std::vector<ObjectChange> proofs;
  int chunks = 0;
  for (;;) {
    auto chunk = a.objects->ReadSnapshot(after, 100);
    REQUIRE(chunk.ok());
    if (chunks++ == 0) {
      base = chunk->versions;
      proofs = chunk->proofs;
    }
    REQUIRE(r.objects->ApplySnapshot(*chunk, "a").ok());
    if (chunk->done) break;
    after = chunk->last;
  }
  CHECK(chunks > 5);
  REQUIRE(r.objects->FinishResync(base, proofs, "a").ok());
  CHECK_FALSE(r.Value("kv", "k").has_value());  // not resurrected
  CHECK(r.Value("kv", "n19") == "v");
  CHECK(r.Value("kv", "mine") == "written while away");  // not lost
  CHECK(r.objects->Versions()->at("a") == 22);
  // a's change 22 came as the proof of the vector, and is logged: r can
  // serve it, and prove its own vector in turn.
  CHECK(r.objects->Floors()->at("a") == 21);
  auto proof = r.objects->ReadChanges("a", 21, 1 << 20);
  REQUIRE(proof.ok());
  REQUIRE(proof->changes.size() == 1);
  CHECK(proof->changes[0].stamp.seq == 22);
  auto again = r.objects->ReadSnapshot({}, 1 << 20);
  REQUIRE(again.ok());
  CHECK(again->proofs.size() == 2);  // a's and r's
  CHECK(r.objects->Versions()->at("r") == mine.stamp.seq);
  // Its own write still reaches a through the log.
  auto fromr = r.objects->ReadChanges("r", 0, 1 << 20);
  REQUIRE(fromr.ok());
  REQUIRE(fromr->changes.size() == 1);
  REQUIRE(a.objects->ApplyRemote(fromr->changes[0], "r").ok());
  CHECK(a.Value("kv", "mine") == "written while away");
}

// Stand-ins for node keys: origin O "signs" bytes B as "O|" + B's length
// and a checksum; the verifier knows the origins in `keys`.
std::string FakeSignature(absl::string_view origin, absl::string_view bytes) {
  uint64_t sum = 1469598103934665603ull;
  for (unsigned char c : bytes) sum = (sum ^ c) * 1099511628211ull;
  return absl::StrCat(origin, "|", bytes.size(), "|", sum);
}
ChangeSigner FakeSigner(const std::string& origin) {
  return [origin](absl::string_view bytes) -> absl::StatusOr<std::string> {
    return FakeSignature(origin, bytes);
  };
}
struct FakeVerifier {
  std::set<std::string> keys;  // origins whose key is known
  ObjectStore::ChangeVerifier Get() {
    return [this](const ObjectChange& c, absl::string_view bytes) {
      if (!keys.contains(c.stamp.origin)) {
        return absl::UnavailableError("origin's key unknown");
      }
      if (c.stamp.signature != FakeSignature(c.stamp.origin, bytes)) {
        return absl::PermissionDeniedError("signature: not the origin's");
      }
      return absl::OkStatus();
    };
  }
};

TEST_CASE("signed changes: a relay cannot forge or alter another's change") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  Node b(dir, "b", &clock);
  Node r(dir, "r", &clock);
  a.store->SetChangeSigner(FakeSigner("a"));
  b.store->SetChangeSigner(FakeSigner("b"));
  FakeVerifier v{{"a", "b"}};
  r.objects->SetChangeVerifier(v.Get());

  // A local write is signed in its log entry and on its object.
  ObjectChange put = a.Put("kv", "k", "\"v1\"");
  CHECK(put.stamp.signature ==
        FakeSignature("a", ObjectStore::SigningBytes(put)));
  CHECK(a.objects->Get("kv", "k")->stamp.signature == put.stamp.signature);
  auto log = a.objects->ReadChanges("a", 0, 1 << 20);
  REQUIRE(log.ok());
  REQUIRE(log->changes.size() == 1);
  CHECK(log->changes[0] == put);

  // b relays a change in a's name that a never made (b's own signature,
  // none, or a's signature over other bytes): refused, nothing changes, and
  // a's sequence is not taken.
  ObjectChange forged = Change("a", 1, At(kStart), "k", "\"evil\"");
  forged.stamp.signature =
      FakeSignature("b", ObjectStore::SigningBytes(forged));
  ObjectChange unsigned_change = forged;
  unsigned_change.stamp.signature.clear();
  ObjectChange altered = put;
  altered.value = "\"evil\"";
  for (const ObjectChange& bad : {forged, unsigned_change, altered}) {
    auto applied = r.objects->ApplyRemote(bad, "b");
    CHECK(applied.status().code() == absl::StatusCode::kPermissionDenied);
  }
  CHECK(r.objects->Versions()->count("a") == 0);
  CHECK(r.Count("SELECT count(*) FROM change_log") == 0);
  CHECK(!r.Value("kv", "k").has_value());
  // a's real change, relayed by b, is taken, with its signature.
  REQUIRE(r.objects->ApplyRemote(put, "b").ok());
  CHECK(r.Value("kv", "k") == "\"v1\"");
  CHECK(r.objects->Get("kv", "k")->stamp.signature == put.stamp.signature);
  auto relayed = r.objects->ReadChanges("a", 0, 1 << 20);
  REQUIRE(relayed.ok());
  CHECK(relayed->changes.at(0) == put);
  // A copy that comes again is a duplicate; a forged copy of it is still
  // a forgery.
  CHECK(*r.objects->ApplyRemote(put, "b") == ApplyResult::kDuplicate);
  CHECK(r.objects->ApplyRemote(altered, "b").status().code() ==
        absl::StatusCode::kPermissionDenied);

  // An origin whose key is not known yet: UNAVAILABLE, nothing taken; the
  // same change is taken once the key is known.
  Node c(dir, "c", &clock);
  c.store->SetChangeSigner(FakeSigner("c"));
  ObjectChange from_c = c.Put("kv", "j", "1");
  auto early = r.objects->ApplyRemote(from_c, "b");
  CHECK(early.status().code() == absl::StatusCode::kUnavailable);
  CHECK(r.objects->Versions()->count("c") == 0);
  v.keys.insert("c");
  CHECK(*r.objects->ApplyRemote(from_c, "b") == ApplyResult::kApplied);
}

TEST_CASE(
    "signed snapshots: a forged row is skipped, an unknown origin waits") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  Node r(dir, "r", &clock);
  a.store->SetChangeSigner(FakeSigner("a"));
  a.Put("kv", "good", "1");
  a.Put("kv", "other", "2");
  auto chunk = a.objects->ReadSnapshot({}, 1 << 20);
  REQUIRE(chunk.ok());
  REQUIRE(chunk->done);
  REQUIRE(chunk->rows.size() == 2);
  // The sender changed one row's value on the way.
  chunk->rows[1].value = "666";
  FakeVerifier v;
  r.objects->SetChangeVerifier(v.Get());
  auto unknown = r.objects->ApplySnapshot(*chunk, "a");
  CHECK(unknown.status().code() == absl::StatusCode::kUnavailable);
  CHECK(r.Count("SELECT count(*) FROM objects") == 0);
  v.keys.insert("a");
  // A sender allowed no forged row: the chunk is dropped whole, unapplied.
  auto spent = r.objects->ApplySnapshot(*chunk, "a", /*max_refused=*/0);
  CHECK(spent.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(r.Count("SELECT count(*) FROM objects") == 0);
  // Allowed one, it is skipped and counted.
  auto skipped = r.objects->ApplySnapshot(*chunk, "a", /*max_refused=*/1);
  REQUIRE(skipped.ok());
  CHECK(*skipped == 1);
  CHECK(r.Value("kv", "good") == "1");
  CHECK(!r.Value("kv", "other").has_value());
}

TEST_CASE("changes made before the node had a key are signed once it has") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  ObjectChange first = a.Put("kv", "k", "1");
  a.Put("kv", "k", "2");
  a.Del("kv", "d");
  a.Put("kv", "kept", "1");
  ObjectChange last = a.Put("kv", "last", "1");
  CHECK(first.stamp.signature.empty());
  auto no_signer = a.objects->SignOwnUnsigned();
  CHECK(no_signer.status().code() == absl::StatusCode::kFailedPrecondition);
  // Collection takes the log up to seq 4 and the tombstone: the rows of
  // k (seq 2) and kept (seq 4) outlive their log entries.
  REQUIRE(a.objects->CollectGarbage({{"a", 4}}, 0).ok());
  CHECK(a.Count("SELECT count(*) FROM change_log") == 1);
  CHECK(a.Count("SELECT count(*) FROM objects") == 3);
  const int64_t revisions =
      a.Count("SELECT coalesce(max(revision), 0) FROM kv_changes");
  a.store->SetChangeSigner(FakeSigner("a"));
  CHECK(*a.objects->SignOwnUnsigned() ==
        3);  // last's entry, k's and kept's rows
  CHECK(*a.objects->SignOwnUnsigned() == 0);
  CHECK(a.Count("SELECT count(*) FROM change_log WHERE signature IS NULL") ==
        0);
  CHECK(a.Count("SELECT count(*) FROM objects WHERE signature IS NULL") == 0);
  // Signing is not a change of the key: watchers see nothing new.
  CHECK(a.Count("SELECT coalesce(max(revision), 0) FROM kv_changes") ==
        revisions);
  // The log entry and every row verify at a receiver.
  FakeVerifier v{{"a"}};
  Node r(dir, "r", &clock);
  r.objects->SetChangeVerifier(v.Get());
  auto log = a.objects->ReadChanges("a", 4, 1 << 20);
  REQUIRE(log.ok());
  REQUIRE(log->changes.size() == 1);
  CHECK(log->changes[0].stamp.seq == last.stamp.seq);
  CHECK(log->changes[0].stamp.signature ==
        FakeSignature("a", ObjectStore::SigningBytes(log->changes[0])));
  auto snap = a.objects->ReadSnapshot({}, 1 << 20);
  REQUIRE(snap.ok());
  REQUIRE(snap->rows.size() == 3);
  REQUIRE(r.objects->ApplySnapshot(*snap, "a").ok());
  CHECK(r.Value("kv", "k") == "2");
  CHECK(r.Value("kv", "kept") == "1");
  CHECK(r.Value("kv", "last") == "1");
}

// A node joined under the name of a revoked node writes as NAME~KEYID
// (store::OriginNode): what it wrote before it joined is renamed to that
// origin in one transaction and signed again; its objects are still its
// name's.
TEST_CASE("a node adopts the origin it joined under, with what it wrote") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node b(dir, "b", &clock);
  b.Put("kv", "k", "1");
  b.Put("node.status", "b", "up");
  b.Del("kv", "k");
  CHECK(OriginNode("b~0123456789ab") == "b");
  CHECK(OriginKeyId("b~0123456789ab") == "0123456789ab");
  CHECK(OriginNode("b") == "b");
  CHECK(OriginKeyId("b").empty());
  const std::string origin = "b~0123456789ab";
  REQUIRE(b.store->AdoptOrigin(origin).ok());
  CHECK(b.store->origin() == origin);
  CHECK(b.Count("SELECT count(*) FROM change_log WHERE origin='b'") == 0);
  CHECK(b.Count("SELECT count(*) FROM objects WHERE origin='b'") == 0);
  CHECK(b.Count(
            "SELECT count(*) FROM change_log WHERE origin='b~0123456789ab'") ==
        3);
  CHECK(b.objects->Versions()->at(origin) == 3);
  CHECK(b.objects->Versions()->count("b") == 0);
  // The sequence goes on; b still owns b's objects.
  ObjectChange next = b.Put("node.status", "b", "busy");
  CHECK(next.stamp.origin == origin);
  CHECK(next.stamp.seq == 4);
  // Signed again once the node has its key.
  b.store->SetChangeSigner(FakeSigner(origin));
  CHECK(*b.objects->SignOwnUnsigned() == 4);
  // Again: nothing to do. Into an origin the database holds: refused, and
  // nothing moves.
  CHECK(b.store->AdoptOrigin(origin).ok());
  Node c(dir, "c", &clock);
  c.Put("kv", "x", "1");
  REQUIRE(
      c.objects
          ->ApplyRemote(Change("c~aaaaaaaaaaaa", 1, At(kStart), "y", "1"), "d")
          .ok());
  absl::Status taken = c.store->AdoptOrigin("c~aaaaaaaaaaaa");
  CHECK(taken.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(c.store->origin() == "c");
  CHECK(c.Count("SELECT count(*) FROM change_log WHERE origin='c'") == 1);
  // After a restart the store opens under the adopted origin (the daemon
  // reads it from the mesh directory) and goes on past 4.
  b.origin = origin;
  b.Open();
  CHECK(b.Put("kv", "after", "1").stamp.seq == 5);
  // A receiver holds b~KEYID's change to b's object as b's own.
  Node a(dir, "a", &clock);
  auto own = a.objects->ApplyRemote(
      Change(origin, 1, At(kStart), "b", "up", "node.status"), "b");
  CHECK_MESSAGE(own.ok(), own.status().ToString());
  auto other = a.objects->ApplyRemote(
      Change("c~aaaaaaaaaaaa", 1, At(kStart), "b", "down", "node.status"), "c");
  CHECK(other.status().code() == absl::StatusCode::kPermissionDenied);
}

// A peer that took an origin's changes before the origin was revoked
// hands them on in a snapshot in good faith: the rows are skipped, the
// rest of the chunk applied, and nothing counted against the sender.
TEST_CASE("a snapshot's rows of a refused origin are skipped, not counted") {
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  a.store->SetChangeSigner(FakeSigner("a"));
  a.Put("kv", "from-a", "1");
  Node x(dir, "x", &clock);
  x.store->SetChangeSigner(FakeSigner("x"));
  for (int i = 0; i < 40; ++i) x.Put("kv", absl::StrCat("from-x/", i), "1");
  // a holds x's changes, then x is revoked.
  for (int64_t seq = 1; seq <= 40; ++seq) {
    auto log = x.objects->ReadChanges("x", seq - 1, 1 << 20);
    REQUIRE(log.ok());
    REQUIRE(a.objects->ApplyRemote(log->changes[0], "x").ok());
  }
  Node r(dir, "r", &clock);
  r.objects->SetChangeVerifier(
      [](const ObjectChange& c, absl::string_view bytes) {
        if (c.stamp.origin == "x") {
          absl::Status s = absl::PermissionDeniedError("x is revoked");
          s.SetPayload(kRefusedOriginPayload, absl::Cord("x"));
          return s;
        }
        if (c.stamp.signature != FakeSignature(c.stamp.origin, bytes)) {
          return absl::PermissionDeniedError("signature: not the origin's");
        }
        return absl::OkStatus();
      });
  auto snap = a.objects->ReadSnapshot({}, 1 << 20);
  REQUIRE(snap.ok());
  REQUIRE(snap->rows.size() == 41);
  // Far fewer refusals allowed than x's rows: none is spent on them.
  absl::StatusOr<size_t> refused = r.objects->ApplySnapshot(*snap, "a", 2);
  REQUIRE_MESSAGE(refused.ok(), refused.status().ToString());
  CHECK(*refused == 0);
  CHECK(r.Value("kv", "from-a") == "1");
  CHECK(r.Value("kv", "from-x/0") == std::nullopt);
}

TEST_CASE("a resync cannot claim changes an origin never signed") {
  // m, a member, answers r's digest with a one-chunk "snapshot" that claims
  // a's changes up to 1,000,000: taken as true, r would hold them as seen
  // and drop a's real next changes as duplicates, for good.
  testing::TempDir dir;
  ManualClock clock(kStart);
  Node a(dir, "a", &clock);
  Node r(dir, "r", &clock);
  a.store->SetChangeSigner(FakeSigner("a"));
  FakeVerifier v{{"a", "m"}};
  r.objects->SetChangeVerifier(v.Get());
  REQUIRE(r.objects->ApplyRemote(a.Put("kv", "k", "1"), "a").ok());
  const VersionVector claimed = {{"a", 1'000'000}};
  // No proof; a proof m signed itself; a's real change 1 for seq 1000000.
  ObjectChange forged = Change("a", 1'000'000, At(kStart), "x", "1");
  forged.stamp.signature =
      FakeSignature("m", ObjectStore::SigningBytes(forged));
  auto real = a.objects->ReadChanges("a", 0, 1 << 20);
  REQUIRE(real.ok());
  ObjectChange renumbered = real->changes.at(0);
  renumbered.stamp.seq = 1'000'000;
  for (const std::vector<ObjectChange>& proofs :
       {std::vector<ObjectChange>{}, std::vector{forged},
        std::vector{renumbered}}) {
    REQUIRE(r.objects->FinishResync(claimed, proofs, "m").ok());
    CHECK(r.objects->Versions()->at("a") == 1);
  }
  CHECK(r.Count("SELECT count(*) FROM change_log WHERE seq=1000000") == 0);
  // a's next change is taken as new.
  ObjectChange next = a.Put("kv", "k", "2");
  CHECK(*r.objects->ApplyRemote(next, "a") == ApplyResult::kApplied);
  CHECK(r.Value("kv", "k") == "2");
  // A proof of an origin r cannot check yet: the resync does not end.
  Node c(dir, "c", &clock);
  c.store->SetChangeSigner(FakeSigner("c"));
  ObjectChange from_c = c.Put("kv", "j", "1");
  auto unknown = r.objects->FinishResync({{"c", 1}}, {from_c}, "m");
  CHECK(unknown.code() == absl::StatusCode::kUnavailable);
  CHECK(r.objects->Versions()->count("c") == 0);
}

}  // namespace
}  // namespace mycel::store
