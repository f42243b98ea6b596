// The State and Query services on a real myceld: the mycel CLI's state and
// query commands (output, exit codes, errors), Watch over the socket with
// a resume, and refused once a tombstone it needs was collected, and a
// write acknowledged before kill -9 that is there after a restart.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "mycel/v1/state.grpc.pb.h"
#include "tests/integration/mesh/mesh_cluster.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

std::unique_ptr<mycel::v1::State::Stub> StateStub(const DaemonProcess& d) {
  // Its own connection: a shared one may still be the one to a daemon
  // this test killed.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return mycel::v1::State::NewStub(grpc::CreateCustomChannel(
      "unix:" + d.socket(), grpc::InsecureChannelCredentials(), args));
}

std::unique_ptr<grpc::ClientContext> Call(int seconds = 10) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(seconds));
  return ctx;
}

TEST_CASE("mycel state get, put, del and ls, with their exit codes") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto put = d.Cli({"state", "put", "app/config", R"({"replicas": 3})"});
  REQUIRE_MESSAGE(put.exit_code == 0, put.err);
  // The version is origin:seq@hlc; other writers of this node may have
  // taken earlier numbers.
  REQUIRE(put.out.rfind("test-node:", 0) == 0);
  const std::string v1 = put.out.substr(0, put.out.size() - 1);
  auto get = d.Cli({"state", "get", "app/config"});
  CHECK(get.exit_code == 0);
  CHECK(get.out == "{\"replicas\": 3}\n");
  CHECK(d.Cli({"state", "put", "app/n", "--", "-1"}).exit_code == 0);
  CHECK(d.Cli({"state", "put", "other", "\"x\""}).exit_code == 0);

  auto ls = d.Cli({"state", "ls", "app/"});
  CHECK(ls.exit_code == 0);
  CHECK(ls.out.find("KEY") != std::string::npos);
  CHECK(ls.out.find("app/config") != std::string::npos);
  CHECK(ls.out.find("app/n") != std::string::npos);
  CHECK(ls.out.find("other") == std::string::npos);
  auto json = d.Cli({"state", "ls", "-o", "json"});
  REQUIRE(json.exit_code == 0);
  mycel::v1::ListStateResponse all;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json.out, &all).ok());
  CHECK(all.objects_size() == 3);
  CHECK(all.revision() == 3);

  // Compare-and-set: the version read, then a stale one.
  auto cas = d.Cli({"state", "put", "app/config", "{}", "--if-version", v1});
  CHECK(cas.exit_code == 0);
  auto stale = d.Cli({"state", "put", "app/config", "{}", "--if-version", v1});
  CHECK(stale.exit_code == 1);
  CHECK(stale.err.find(absl::StrCat("is at version ",
                                    cas.out.substr(0, cas.out.size() - 1))) !=
        std::string::npos);
  auto exists =
      d.Cli({"state", "put", "app/config", "{}", "--if-version", "none"});
  CHECK(exists.exit_code == 1);

  // Bad input names the field; bad usage is exit 2.
  auto bad = d.Cli({"state", "put", "k", "{not json"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("value: not a JSON text") != std::string::npos);
  // Not UTF-8: named by the CLI (gRPC would refuse such a request with
  // UNIMPLEMENTED and no message).
  auto latin1 = d.Cli({"state", "put", "k", "\"caf\xe9\""});
  CHECK(latin1.exit_code == 1);
  CHECK(latin1.err.find("value: not a JSON text: ") != std::string::npos);
  CHECK(latin1.err.find("ill-formed UTF-8") != std::string::npos);
  auto latin1_key = d.Cli({"state", "put", "caf\xe9", "1"});
  CHECK(latin1_key.exit_code == 1);
  CHECK(latin1_key.err.find("key: not UTF-8: incomplete UTF-8 string; last "
                            "byte: 0xE9") != std::string::npos);
  CHECK(d.Cli({"state", "get", "caf\xe9"}).exit_code == 1);
  // Any command's string fields, nested ones included, the same way.
  auto sql = d.Cli({"query", "SELECT 'caf\xe9!'"});
  CHECK(sql.exit_code == 1);
  CHECK(sql.err.find("sql: not UTF-8: invalid UTF-8 byte at index 12") !=
        std::string::npos);
  auto watch = d.Cli({"state", "watch", "caf\xe9!"});
  CHECK(watch.exit_code == 1);
  CHECK(watch.err.find("prefix: not UTF-8") != std::string::npos);
  auto big = d.Cli({"state", "put", std::string(2000, 'k'), "1"});
  CHECK(big.exit_code == 1);
  CHECK(big.err.find("key: must be 1 to 1024 bytes") != std::string::npos);
  auto version = d.Cli({"state", "put", "k", "1", "--if-version", "x"});
  CHECK(version.exit_code == 1);
  CHECK(version.err.find("if_version:") != std::string::npos);
  CHECK(d.Cli({"state", "put", "k"}).exit_code == 2);
  CHECK(d.Cli({"state", "get"}).exit_code == 2);
  CHECK(d.Cli({"state", "watch", "--from", "x"}).exit_code == 2);
  CHECK(d.Cli({"state", "nope"}).exit_code == 2);

  auto del = d.Cli({"state", "del", "app/config"});
  CHECK(del.exit_code == 0);
  auto gone = d.Cli({"state", "get", "app/config"});
  CHECK(gone.exit_code == 1);
  CHECK(gone.err.find("app/config") != std::string::npos);
}

TEST_CASE("Watch sends the keys, then changes, and resumes from a revision") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto stub = StateStub(d);
  auto put = [&](const std::string& key, const std::string& value) {
    mycel::v1::PutStateRequest req;
    req.set_key(key);
    req.set_value(value);
    mycel::v1::StateObject resp;
    REQUIRE(stub->Put(Call().get(), req, &resp).ok());
  };
  put("w/a", "1");
  put("x/other", "1");

  int64_t last = 0;
  {
    auto ctx = Call();
    mycel::v1::WatchStateRequest req;
    req.set_prefix("w/");
    auto reader = stub->Watch(ctx.get(), req);
    mycel::v1::StateEvent e;
    REQUIRE(reader->Read(&e));
    CHECK(e.type() == mycel::v1::StateEvent::TYPE_PUT);
    CHECK(e.initial());
    CHECK(e.object().key() == "w/a");
    REQUIRE(reader->Read(&e));
    CHECK(e.type() == mycel::v1::StateEvent::TYPE_SYNCED);
    CHECK(e.revision() == 2);
    put("w/b", "2");
    REQUIRE(reader->Read(&e));
    CHECK(e.type() == mycel::v1::StateEvent::TYPE_PUT);
    CHECK(e.object().key() == "w/b");
    CHECK(e.object().value() == "2");
    CHECK(e.revision() == 3);
    last = e.revision();
    ctx->TryCancel();
    while (reader->Read(&e)) {
    }
    reader->Finish().IgnoreError();
  }
  // Changed while nobody watched.
  put("w/c", "3");
  mycel::v1::DeleteStateRequest del;
  del.set_key("w/a");
  mycel::v1::DeleteStateResponse dr;
  REQUIRE(stub->Delete(Call().get(), del, &dr).ok());
  {
    auto ctx = Call();
    mycel::v1::WatchStateRequest req;
    req.set_prefix("w/");
    req.set_from_revision(last);
    auto reader = stub->Watch(ctx.get(), req);
    mycel::v1::StateEvent e;
    REQUIRE(reader->Read(&e));
    CHECK(e.type() == mycel::v1::StateEvent::TYPE_PUT);
    CHECK(e.object().key() == "w/c");
    CHECK(!e.initial());
    REQUIRE(reader->Read(&e));
    CHECK(e.type() == mycel::v1::StateEvent::TYPE_DELETE);
    CHECK(e.object().key() == "w/a");
    REQUIRE(reader->Read(&e));
    CHECK(e.type() == mycel::v1::StateEvent::TYPE_SYNCED);
    ctx->TryCancel();
    while (reader->Read(&e)) {
    }
    reader->Finish().IgnoreError();
  }
  // A revision this node never gave: OUT_OF_RANGE, saying so.
  {
    auto ctx = Call();
    mycel::v1::WatchStateRequest req;
    req.set_from_revision(1000);
    auto reader = stub->Watch(ctx.get(), req);
    mycel::v1::StateEvent e;
    CHECK(!reader->Read(&e));
    grpc::Status st = reader->Finish();
    CHECK(st.error_code() == grpc::StatusCode::OUT_OF_RANGE);
    CHECK(st.error_message().find("revision 1000") != std::string::npos);
  }
  // The CLI prints the same stream, until interrupted.
  auto cli = testing::Run({"/usr/bin/timeout", "2", testing::Binary("mycel"),
                           "--socket", d.socket(), "state", "watch", "w/"});
  CHECK(cli.exit_code == 124);  // still watching when timeout stopped it
  CHECK(cli.out.find("PUT w/b 2") != std::string::npos);
  CHECK(cli.out.find("SYNCED") != std::string::npos);
  CHECK(cli.out.find("w/a") == std::string::npos);  // deleted
}

TEST_CASE(
    "a watch from before a collected tombstone is OUT_OF_RANGE, and the "
    "listing's revision resumes") {
  // The first node of a mesh runs replication, which collects tombstones:
  // with no other member, each at the first collection after the delete,
  // every quarter of --tombstone-retention (here every second).
  testing::MeshNodeProcess n({"--tombstone-retention", "4s"});
  REQUIRE(n.daemon.Start());
  testing::CommandResult init = n.Local({"mesh", "init", "--name", "test"});
  REQUIRE_MESSAGE(init.exit_code == 0, init.err);
  auto stub = StateStub(n.daemon);
  for (const char* k : {"g/a", "g/b"}) {
    mycel::v1::PutStateRequest put;
    put.set_key(k);
    put.set_value("1");
    mycel::v1::StateObject out;
    REQUIRE(stub->Put(Call().get(), put, &out).ok());
  }
  mycel::v1::ListStateRequest list;
  list.set_prefix("g/");
  mycel::v1::ListStateResponse before;
  REQUIRE(stub->List(Call().get(), list, &before).ok());
  mycel::v1::DeleteStateRequest del;
  del.set_key("g/a");
  mycel::v1::DeleteStateResponse deleted;
  REQUIRE(stub->Delete(Call().get(), del, &deleted).ok());
  // What a client that last saw `before` gets on its resume.
  auto resume = [&](int64_t from, std::vector<mycel::v1::StateEvent>* got) {
    auto ctx = Call(5);
    mycel::v1::WatchStateRequest req;
    req.set_prefix("g/");
    req.set_from_revision(from);
    auto reader = stub->Watch(ctx.get(), req);
    mycel::v1::StateEvent e;
    while (reader->Read(&e)) {
      got->push_back(e);
      if (e.type() == mycel::v1::StateEvent::TYPE_SYNCED) ctx->TryCancel();
    }
    return reader->Finish();
  };
  std::vector<mycel::v1::StateEvent> events;
  grpc::Status st = resume(before.revision(), &events);
  // At first the delete is still in the log: the resume carries it.
  if (st.error_code() == grpc::StatusCode::CANCELLED) {
    REQUIRE(events.size() == 2);
    CHECK(events[0].type() == mycel::v1::StateEvent::TYPE_DELETE);
    CHECK(events[0].object().key() == "g/a");
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (st.error_code() != grpc::StatusCode::OUT_OF_RANGE &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    events.clear();
    st = resume(before.revision(), &events);
  }
  // Once collected, the same resume is refused: the client may have missed
  // a delete, and must list again.
  REQUIRE_MESSAGE(st.error_code() == grpc::StatusCode::OUT_OF_RANGE,
                  st.error_code(), " ", st.error_message());
  CHECK(st.error_message().find("compacted") != std::string::npos);
  CHECK(st.error_message().find("list again") != std::string::npos);
  CHECK(events.empty());
  mycel::v1::ListStateResponse after;
  REQUIRE(stub->List(Call().get(), list, &after).ok());
  REQUIRE(after.objects_size() == 1);
  CHECK(after.objects(0).key() == "g/b");
  events.clear();
  st = resume(after.revision(), &events);
  CHECK(st.error_code() == grpc::StatusCode::CANCELLED);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type() == mycel::v1::StateEvent::TYPE_SYNCED);
}

TEST_CASE(
    "a node outside a mesh collects its change log, keeps its values and "
    "never reuses a sequence number") {
  // No mesh, so no replicator: before, every put stayed in the log for
  // good (a key written a million times, a million rows).
  TempDir dir;
  DaemonProcess d(dir.path(), {"--tombstone-retention", "4s"});
  REQUIRE(d.Start());
  auto stub = StateStub(d);
  int64_t last_seq = 0;
  auto put = [&](const std::string& key, const std::string& value) {
    mycel::v1::PutStateRequest req;
    req.set_key(key);
    req.set_value(value);
    mycel::v1::StateObject resp;
    grpc::Status st = stub->Put(Call().get(), req, &resp);
    REQUIRE_MESSAGE(st.ok(), st.error_message());
    // origin:seq@hlc
    const std::string& v = resp.version();
    REQUIRE(absl::SimpleAtoi(
        v.substr(v.find(':') + 1, v.find('@') - v.find(':') - 1), &last_seq));
  };
  for (int i = 1; i <= 40; ++i) put("gc/k", std::to_string(i));
  put("gc/gone", "1");
  mycel::v1::DeleteStateRequest del;
  del.set_key("gc/gone");
  mycel::v1::DeleteStateResponse dr;
  REQUIRE(stub->Delete(Call().get(), del, &dr).ok());
  const int64_t before = last_seq;
  auto log_rows = [&] {
    auto q =
        d.Cli({"-o", "json", "query", "SELECT count(*) AS n FROM changes"});
    REQUIRE_MESSAGE(q.exit_code == 0, q.err);
    return q.out;
  };
  // Collected within a GC interval (a second here): only the origin's last
  // change stays, which carries its last sequence number.
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  std::string rows = log_rows();
  while (rows.find("\"n\": 1}") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    rows = log_rows();
  }
  CHECK_MESSAGE(rows.find("\"n\": 1}") != std::string::npos, rows);
  CHECK(d.Cli({"state", "get", "gc/k"}).out == "40\n");
  auto gone = d.Cli({"state", "get", "gc/gone"});
  CHECK(gone.exit_code == 1);
  // The next write takes the next number, across a restart too.
  put("gc/k", "41");
  CHECK(last_seq > before);
  REQUIRE(d.Signal(SIGTERM) == 0);
  REQUIRE(d.Start());
  stub = StateStub(d);
  const int64_t before_restart = last_seq;
  put("gc/k", "42");
  CHECK(last_seq > before_restart);
  CHECK(d.Cli({"state", "get", "gc/k"}).out == "42\n");
}

TEST_CASE(
    "past --state-quota a put is refused, and says so; a delete that frees a "
    "value is not") {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--state-quota", "1M"});
  REQUIRE(d.Start());
  auto stub = StateStub(d);
  // 64 KB values: each put holds about twice that (objects and change log).
  const std::string value =
      absl::StrCat("\"", std::string(64 << 10, 'q'), "\"");
  int acknowledged = 0;
  grpc::Status refused;
  for (int i = 0; i < 64 && refused.ok(); ++i) {
    mycel::v1::PutStateRequest req;
    req.set_key(absl::StrCat("q/", i));
    req.set_value(value);
    mycel::v1::StateObject obj;
    auto ctx = Call();
    grpc::Status s = stub->Put(ctx.get(), req, &obj);
    if (s.ok()) {
      ++acknowledged;
    } else {
      refused = s;
    }
    // The daemon measures its database at most every 100 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
  }
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_MESSAGE(absl::StartsWith(refused.error_message(), "state_quota: "),
                refused.error_message());
  CHECK(acknowledged >= 2);
  CHECK(acknowledged <= 8);
  // The CLI: exit status 1, the reason on stderr.
  auto put = d.Cli({"state", "put", "q/cli", "1"});
  CHECK(put.exit_code == 1);
  CHECK_MESSAGE(absl::StrContains(put.err, "state_quota"), put.err);
  // Everything acknowledged is there (a header line, then a key a line); a
  // delete is taken.
  auto ls = d.Cli({"state", "ls", "q/"});
  CHECK(std::count(ls.out.begin(), ls.out.end(), '\n') == acknowledged + 1);
  CHECK(d.Cli({"state", "del", "q/0"}).exit_code == 0);
  // A delete that would only add a tombstone is refused too.
  auto del_absent = d.Cli({"state", "del", "q/absent"});
  CHECK(del_absent.exit_code == 1);
  CHECK_MESSAGE(absl::StrContains(del_absent.err, "state_quota"),
                del_absent.err);
  // The node's stats say how full it is.
  auto stats = d.Cli({"node", "stats", "state."});
  REQUIRE(stats.exit_code == 0);
  std::map<std::string, int64_t> counters;
  for (absl::string_view line : absl::StrSplit(stats.out, '\n')) {
    std::vector<std::string> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t v = 0;
    if (words.size() == 2 && absl::SimpleAtoi(words[1], &v)) {
      counters[words[0]] = v;
    }
  }
  CHECK(counters["state.quota_bytes"] == 1 << 20);
  CHECK(counters["state.writes_refused_over_quota"] == 3);
  CHECK(counters["state.used_bytes"] >= 1 << 20);
}

TEST_CASE(
    "Watch streams beyond a caller's half of --max-watches are refused, freed "
    "on close") {
  // One caller (here the local socket) may hold half of the node's
  // watches: 2 of 4.
  TempDir dir;
  DaemonProcess d(dir.path(), {"--max-watches", "4"});
  REQUIRE(d.Start());
  auto stub = StateStub(d);
  mycel::v1::WatchStateRequest req;
  req.set_prefix("w/");
  mycel::v1::StateEvent e;
  // An accepted watch sends the keys, then SYNCED; a refused one nothing.
  // Two open, each holding its place until its client goes.
  auto ctx1 = Call();
  auto r1 = stub->Watch(ctx1.get(), req);
  REQUIRE(r1->Read(&e));
  auto ctx2 = Call();
  auto r2 = stub->Watch(ctx2.get(), req);
  REQUIRE(r2->Read(&e));
  // A third is refused, and says why.
  auto ctx3 = Call();
  auto r3 = stub->Watch(ctx3.get(), req);
  CHECK_FALSE(r3->Read(&e));
  grpc::Status refused = r3->Finish();
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(refused.error_message().find(
            "half of what they leave of max_watches") != std::string::npos);
  // The first goes: its place is free again (once the daemon has seen the
  // cancellation).
  ctx1->TryCancel();
  (void)r1->Finish();
  bool taken = false;
  for (int i = 0; i < 50 && !taken; ++i) {
    auto ctx = Call();
    auto r = stub->Watch(ctx.get(), req);
    taken = r->Read(&e);
    ctx->TryCancel();
    (void)r->Finish();
    if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(taken);
  ctx2->TryCancel();
  (void)r2->Finish();
}

TEST_CASE("a put acknowledged before kill -9 is there after a restart") {
  for (const char* durability : {"normal", "full"}) {
    CAPTURE(durability);
    TempDir dir;
    DaemonProcess d(dir.path(), {"--durability", durability});
    REQUIRE(d.Start());
    auto stub = StateStub(d);
    int64_t last_seq = 0;
    for (int i = 0; i < 50; ++i) {
      mycel::v1::PutStateRequest req;
      req.set_key(absl::StrCat("k", i));
      req.set_value(absl::StrCat(i));
      mycel::v1::StateObject resp;
      REQUIRE(stub->Put(Call().get(), req, &resp).ok());
      last_seq = resp.seq();
    }
    CHECK(d.Signal(SIGKILL) == 128 + SIGKILL);
    REQUIRE(d.Start());
    auto after = StateStub(d);
    for (int i = 0; i < 50; ++i) {
      mycel::v1::GetStateRequest req;
      req.set_key(absl::StrCat("k", i));
      mycel::v1::StateObject resp;
      grpc::Status st = after->Get(Call().get(), req, &resp);
      REQUIRE_MESSAGE(st.ok(), st.error_message());
      CHECK(resp.value() == absl::StrCat(i));
      CHECK(resp.origin() == "test-node");
    }
    // And the next write takes a sequence number past them, none reused.
    mycel::v1::PutStateRequest req;
    req.set_key("next");
    req.set_value("1");
    mycel::v1::StateObject resp;
    REQUIRE(after->Put(Call().get(), req, &resp).ok());
    CHECK(resp.seq() > last_seq);
  }
}

TEST_CASE(
    "many puts in flight at once are each answered, and of racing "
    "compare-and-sets on one key exactly one wins") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto stub = StateStub(d);
  // More at once than the sync server's thread cap (256): puts hold no
  // thread while they wait for their commit.
  constexpr int kPuts = 400;
  constexpr int kRacers = 40;
  struct Call {
    grpc::ClientContext ctx;
    mycel::v1::PutStateRequest req;
    mycel::v1::StateObject resp;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::mutex mu;
  std::condition_variable cv;
  int left = kPuts + kRacers;
  for (int i = 0; i < kPuts + kRacers; ++i) {
    auto c = std::make_unique<Call>();
    c->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(30));
    if (i < kPuts) {
      c->req.set_key(absl::StrCat("many/", i));
      c->req.set_value(absl::StrCat(i));
    } else {
      // Each racer creates the key only if it does not exist yet.
      c->req.set_key("race");
      c->req.set_value(absl::StrCat(i));
      c->req.set_if_version("none");
    }
    calls.push_back(std::move(c));
  }
  for (auto& c : calls) {
    stub->async()->Put(&c->ctx, &c->req, &c->resp,
                       [&, cp = c.get()](grpc::Status st) {
                         std::lock_guard<std::mutex> lock(mu);
                         cp->status = std::move(st);
                         if (--left == 0) cv.notify_all();
                       });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(
        cv.wait_for(lock, std::chrono::seconds(60), [&] { return left == 0; }));
  }
  std::set<int64_t> seqs;
  int won = 0;
  std::string winner;
  for (int i = 0; i < kPuts + kRacers; ++i) {
    const Call& c = *calls[static_cast<size_t>(i)];
    if (i < kPuts) {
      REQUIRE_MESSAGE(c.status.ok(), i, ": ", c.status.error_code(), " ",
                      c.status.error_message());
      CHECK(c.resp.key() == c.req.key());
      seqs.insert(c.resp.seq());
      continue;
    }
    if (c.status.ok()) {
      ++won;
      winner = c.req.value();
      seqs.insert(c.resp.seq());
    } else {
      CHECK(c.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
      CHECK(c.status.error_message().find("not the expected none") !=
            std::string::npos);
    }
  }
  CHECK(won == 1);
  // One sequence number per acknowledged put, none shared.
  CHECK(static_cast<int>(seqs.size()) == kPuts + 1);
  auto got = d.Cli({"state", "get", "race"});
  REQUIRE(got.exit_code == 0);
  CHECK(got.out.find(winner) != std::string::npos);
  auto ls = d.Cli({"-o", "json", "query", "SELECT count(*) AS n FROM kv"});
  REQUIRE(ls.exit_code == 0);
  CHECK(ls.out.find(absl::StrCat("\"n\": ", kPuts + 1)) != std::string::npos);
}

TEST_CASE("myceld refuses an unknown --durability, naming it") {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--durability", "sometimes"});
  CHECK(!d.Start(std::chrono::seconds(10)));
  CHECK(d.Log().find("durability: want normal or full") != std::string::npos);
}

TEST_CASE(
    "mycel query prints a table or JSON and refuses what is not a "
    "SELECT") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  REQUIRE(d.Cli({"state", "put", "q/a", R"({"n": 7})"}).exit_code == 0);
  auto table =
      d.Cli({"query", "SELECT key, value ->> '$.n' AS n FROM kv ORDER BY key"});
  REQUIRE_MESSAGE(table.exit_code == 0, table.err);
  CHECK(table.out.find("key") != std::string::npos);
  CHECK(table.out.find("q/a") != std::string::npos);
  CHECK(table.out.find("7") != std::string::npos);
  auto json = d.Cli({"-o", "json", "query",
                     "SELECT key, value ->> '$.n' AS n, NULL AS z FROM kv"});
  REQUIRE(json.exit_code == 0);
  CHECK(json.out == "[\n  {\"key\": \"q/a\", \"n\": 7, \"z\": null}\n]\n");
  auto nodes = d.Cli({"query", "SELECT count(*) FROM members"});
  CHECK(nodes.exit_code == 0);
  // Text that is not UTF-8 comes back as bytes, not as a broken answer.
  auto bytes = d.Cli({"-o", "json", "query", "SELECT CAST(x'ff00' AS TEXT)"});
  CHECK(bytes.exit_code == 0);
  CHECK(bytes.out.find("\"ff00\"") != std::string::npos);

  auto drop = d.Cli({"query", "DROP TABLE objects"});
  CHECK(drop.exit_code == 1);
  CHECK(drop.err.find("only SELECT") != std::string::npos);
  auto secret = d.Cli({"query", "SELECT * FROM join_tokens"});
  CHECK(secret.exit_code == 1);
  CHECK(secret.err.find("may not read") != std::string::npos);
  auto forever =
      d.Cli({"query", "--timeout-ms", "300",
             "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) "
             "SELECT count(*) FROM c"});
  CHECK(forever.exit_code == 1);
  CHECK(forever.err.find("time limit") != std::string::npos);
  auto many = d.Cli({"query", "--max-rows", "5",
                     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 "
                     "FROM c LIMIT 1000) SELECT a.x FROM c a, c b"});
  CHECK(many.exit_code == 0);
  CHECK(many.err.find("truncated after 5 rows") != std::string::npos);
  CHECK(d.Cli({"query"}).exit_code == 2);
  // The daemon is unharmed.
  CHECK(d.Cli({"state", "get", "q/a"}).exit_code == 0);
}

}  // namespace
}  // namespace mycel
