// MemberStore on a real state database in a temp dir: what is saved reads
// back, a restart takes a higher incarnation, and a damaged row is skipped
// with a logged error instead of keeping the node out of the mesh.
#include "mesh/membership/member_store.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "daemon/store/store.h"
#include "mesh/membership/codec.h"
#include "mesh/membership/fake_signer.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "tests/testing/process.h"

namespace mycel::membership {
namespace {

constexpr uint64_t kRealm = 9;
const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

AliveRef Record(const std::string& name, uint64_t inc) {
  FakeSigner signer(kRealm, name);
  Alive a;
  a.name = name;
  a.incarnation = inc;
  a.meta.addresses = {name + ":7946", "10.0.0.1:7946"};
  a.meta.labels = {{"rack", "r1"}, {"zone", "z2"}};
  a.meta.capacity = {{"cpu_millicores", 4000}};
  REQUIRE(signer.Sign(&a).ok());
  return std::make_shared<const Alive>(std::move(a));
}

MemberSnapshot Member(const std::string& name, MemberState state, uint64_t inc,
                      uint64_t record_inc) {
  MemberSnapshot m;
  m.name = name;
  m.state = state;
  m.incarnation = inc;
  m.record = Record(name, record_inc);
  m.state_since = kNow - absl::Seconds(5);
  m.last_heard = kNow - absl::Milliseconds(1500);
  return m;
}

std::unique_ptr<store::Store> OpenStore(const testing::TempDir& dir) {
  absl::StatusOr<std::unique_ptr<store::Store>> s =
      store::Store::Open(dir.Sub("mycel.db"));
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  return *std::move(s);
}

TEST_CASE("members, seeds and the incarnation round-trip") {
  testing::TempDir dir;
  {
    auto db = OpenStore(dir);
    MemberStore ms(db.get());
    MemberStoreBatch b;
    b.upserts = {Member("node-a", MemberState::kAlive, 10, 10),
                 Member("node-b", MemberState::kSuspect, 12, 11),
                 Member("node-c", MemberState::kDead, 7, 7),
                 Member("node-d", MemberState::kLeft, 3, 3)};
    b.upserts[2].last_heard = absl::InfinitePast();
    b.incarnation = 1234;
    b.seeds = std::vector<std::string>{"10.0.0.9:7946", "seed.example:7946"};
    REQUIRE(ms.Save(b).ok());
    // A second batch replaces one row and removes another.
    MemberStoreBatch b2;
    b2.upserts = {Member("node-a", MemberState::kSuspect, 20, 19)};
    b2.removed = {"node-d"};
    REQUIRE(ms.Save(b2).ok());
  }
  // Reopened, as after a restart.
  auto db = OpenStore(dir);
  MemberStore ms(db.get());
  absl::StatusOr<PersistedMembership> p = ms.Load();
  REQUIRE(p.ok());
  CHECK(p->skipped == 0);
  CHECK(p->incarnation == std::optional<uint64_t>(1234));
  CHECK(p->seeds ==
        std::vector<std::string>{"10.0.0.9:7946", "seed.example:7946"});
  REQUIRE(p->members.size() == 3);
  const MemberSnapshot& a = p->members[0];
  CHECK(a.name == "node-a");
  CHECK(a.state == MemberState::kSuspect);
  CHECK(a.incarnation == 20);
  REQUIRE(a.record != nullptr);
  CHECK(*a.record == *Record("node-a", 19));
  CHECK(a.state_since == kNow - absl::Seconds(5));
  CHECK(a.last_heard == kNow - absl::Milliseconds(1500));
  CHECK(p->members[1].name == "node-b");
  CHECK(p->members[1].state == MemberState::kSuspect);
  CHECK(p->members[1].incarnation == 12);
  CHECK(p->members[1].record->incarnation == 11);
  CHECK(p->members[2].name == "node-c");
  CHECK(p->members[2].state == MemberState::kDead);
  CHECK(p->members[2].last_heard == absl::InfinitePast());
  // The signatures survive: the records still verify.
  FakeVerifier verifier(kRealm);
  for (const MemberSnapshot& m : p->members) {
    absl::StatusOr<std::string> who = verifier.Verify(*m.record);
    REQUIRE(who.ok());
    CHECK(*who == m.name);
  }
}

TEST_CASE("a restart continues with a higher incarnation") {
  // The wall clock wins when it is ahead of what was stored...
  CHECK(StartIncarnation(std::nullopt, kNow) ==
        static_cast<uint64_t>(absl::ToUnixMicros(kNow)));
  CHECK(StartIncarnation(5, kNow) ==
        static_cast<uint64_t>(absl::ToUnixMicros(kNow)));
  // ...and the stored one + 1 when the clock is behind it (it was set
  // back, or the node refuted many times).
  const uint64_t ahead = absl::ToUnixMicros(kNow) + 1'000'000'000;
  CHECK(StartIncarnation(ahead, kNow) == ahead + 1);

  testing::TempDir dir;
  auto db = OpenStore(dir);
  MemberStore ms(db.get());
  MemberStoreBatch b;
  b.incarnation = ahead;
  b.upserts = {Member("node-a", MemberState::kDead, 10, 10)};
  b.seeds = std::vector<std::string>{"seed:1"};
  REQUIRE(ms.Save(b).ok());

  MembershipOptions o;
  o.name = "self";
  REQUIRE(ms.Restore(kNow, &o).ok());
  CHECK(o.incarnation == ahead + 1);
  REQUIRE(o.members.size() == 1);
  CHECK(o.members[0].state == MemberState::kDead);
  CHECK(o.seeds == std::vector<std::string>{"seed:1"});

  // Seeds given by the caller win over the stored ones.
  MembershipOptions o2;
  o2.seeds = {"given:2"};
  REQUIRE(ms.Restore(kNow, &o2).ok());
  CHECK(o2.seeds == std::vector<std::string>{"given:2"});
}

TEST_CASE("a row with corrupt record bytes is skipped with a logged error") {
  testing::TempDir dir;
  auto db = OpenStore(dir);
  MemberStore ms(db.get());
  MemberStoreBatch b;
  b.upserts = {Member("node-a", MemberState::kAlive, 10, 10),
               Member("node-b", MemberState::kAlive, 11, 11),
               Member("node-c", MemberState::kAlive, 12, 12)};
  REQUIRE(ms.Save(b).ok());
  // Damage: garbage bytes in one row, another member's record in another.
  REQUIRE(db->Execute("UPDATE members SET record=? WHERE name='node-b'",
                      [](store::Stmt& st) {
                        st.BindBlob(1, std::string("\xff\x01\x02garbage", 10));
                      })
              .ok());
  const std::string other = EncodeAlive(*Record("node-x", 1));
  REQUIRE(db->Execute("UPDATE members SET record=? WHERE name='node-c'",
                      [&](store::Stmt& st) { st.BindBlob(1, other); })
              .ok());

  const std::string log_path = dir.Sub("log");
  const int fd = ::open(log_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  log::SetSink(fd, false);
  absl::StatusOr<PersistedMembership> p = ms.Load();
  log::SetSink(STDERR_FILENO, false);
  ::close(fd);

  REQUIRE(p.ok());
  CHECK(p->skipped == 2);
  REQUIRE(p->members.size() == 1);
  CHECK(p->members[0].name == "node-a");
  absl::StatusOr<std::string> logged = ReadFile(log_path);
  REQUIRE(logged.ok());
  CHECK(logged->find("level=error") != std::string::npos);
  CHECK(logged->find("member=node-b") != std::string::npos);
  CHECK(logged->find("member=node-c") != std::string::npos);
  CHECK(logged->find("node-x") != std::string::npos);
}

}  // namespace
}  // namespace mycel::membership
