// StateWatchers (daemon/server/state_service.h): a caught-up watch is woken
// at once by a write through the API and by a peer's change to the user's
// namespace (OnChange), and by any other change within the poll interval;
// a watcher that went away is dropped unheard; with none waiting, a write
// posts nothing.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <memory>

#include "daemon/server/state_service.h"
#include "daemon/store/objects.h"
#include "daemon/store/state_store.h"
#include "daemon/store/store.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

struct Fixture {
  Fixture() {
    auto s = store::Store::Open(dir.Sub("w.db"),
                                store::Store::Options{.origin = "n1"});
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    db = *std::move(s);
    objects = std::make_unique<store::ObjectStore>(db.get());
    state = std::make_unique<store::StateStore>(objects.get(), db.get());
    watchers = std::make_unique<StateWatchers>(state.get(), &io);
  }
  // Runs the loop until `woken` or `limit` passes; returns how long.
  absl::Duration RunUntil(const bool& woken, absl::Duration limit) {
    const absl::Time start = absl::Now();
    while (!woken && absl::Now() - start < limit) {
      io.run_for(std::chrono::milliseconds(10));
      io.restart();
    }
    return absl::Now() - start;
  }

  testing::TempDir dir;
  boost::asio::io_context io;
  std::unique_ptr<store::Store> db;
  std::unique_ptr<store::ObjectStore> objects;
  std::unique_ptr<store::StateStore> state;
  std::unique_ptr<StateWatchers> watchers;
};

TEST_CASE("a change received from a peer wakes a caught-up watcher") {
  Fixture f;
  bool woken = false;
  f.watchers->Wait(0, std::make_shared<bool>(true), [&] { woken = true; });
  // Nothing changed: it sleeps through a few polls.
  f.RunUntil(woken, absl::Milliseconds(300));
  CHECK(!woken);
  store::ObjectChange c;
  c.stamp = {"n2", 1, 1};
  c.ns = "kv";
  c.key = "k";
  c.value = "1";
  REQUIRE(f.objects->ApplyRemote(c, "n2").ok());
  const absl::Duration took = f.RunUntil(woken, absl::Seconds(2));
  CHECK(woken);
  CHECK(took < absl::Seconds(1));
}

TEST_CASE("a peer's change to the user's namespace wakes a watcher at once") {
  Fixture f;
  f.objects->SetRemoteChangeListener(
      [&f](const store::ObjectChange& c) { f.watchers->OnChange(c); });
  bool woken = false;
  f.watchers->Wait(0, std::make_shared<bool>(true), [&] { woken = true; });
  store::ObjectChange c;
  c.stamp = {"n2", 1, 1};
  c.ns = "mesh.other";  // not the user's: no check posted
  c.key = "k";
  c.value = "1";
  REQUIRE(f.objects->ApplyRemote(c, "n2").ok());
  CHECK(f.io.poll() == 0);
  CHECK(!woken);
  f.io.restart();
  c.stamp = {"n2", 2, 2};
  c.ns = "kv";
  REQUIRE(f.objects->ApplyRemote(c, "n2").ok());
  f.io.poll();  // only what is ready now: no poll timer has fired yet
  CHECK(woken);
}

TEST_CASE("Notify wakes at once; a watcher gone is not called") {
  Fixture f;
  bool woken = false;
  bool gone_called = false;
  auto gone = std::make_shared<bool>(true);
  f.watchers->Wait(0, std::make_shared<bool>(true), [&] { woken = true; });
  f.watchers->Wait(0, gone, [&] { gone_called = true; });
  *gone = false;
  REQUIRE(f.state->Put("k", "1", std::nullopt).ok());
  f.watchers->Notify();
  f.io.poll();  // only what is ready now: no poll timer has fired yet
  CHECK(woken);
  CHECK(!gone_called);
}

TEST_CASE("with no watch waiting, a write does not wake the loop") {
  Fixture f;
  REQUIRE(f.state->Put("k", "1", std::nullopt).ok());
  f.watchers->Notify();
  // Nothing was posted: the loop has no handler to run.
  CHECK(f.io.poll() == 0);
}

TEST_CASE("a write that found no one waiting still wakes the watch") {
  // The watch read revision 0, then the write committed and its Notify
  // found no one waiting (so posted nothing), then the watch waited from
  // revision 0: it is woken when it waits, not a poll interval later.
  Fixture f;
  REQUIRE(f.state->Put("k", "1", std::nullopt).ok());
  f.watchers->Notify();
  REQUIRE(f.io.poll() == 0);
  f.io.restart();  // out of work, the loop stopped
  bool woken = false;
  f.watchers->Wait(0, std::make_shared<bool>(true), [&] { woken = true; });
  CHECK(woken);
  // Waiting from the revision it has seen, it sleeps until the next write.
  bool again = false;
  f.watchers->Wait(1, std::make_shared<bool>(true), [&] { again = true; });
  f.io.poll();
  CHECK(!again);
  REQUIRE(f.state->Put("k", "2", std::nullopt).ok());
  f.watchers->Notify();
  f.io.poll();
  CHECK(again);
}

}  // namespace
}  // namespace mycel
