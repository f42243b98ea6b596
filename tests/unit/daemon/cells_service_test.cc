// The Cells and Executables services over a fake Cells (cells/cells.h): the
// server edge is authorize-validate-call-convert, so what a client sees is
// the fake's answer with its status code and message, and a Wait holds no
// server thread while it waits. The server is real (gRPC over a unix socket
// in a temporary directory); nothing below the Cells interface runs.
#include "daemon/server/cells_service.h"

#include <grpcpp/grpcpp.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "doctest/doctest.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

class FakeCells final : public cells::Cells {
 public:
  absl::StatusOr<mycel::v1::Cell> CreateCell(
      const mycel::v1::CellSpec& spec, const cells::CreateOptions&) override {
    absl::MutexLock lock(&mu_);
    if (spec.name() == "taken") {
      return absl::AlreadyExistsError("cell \"taken\" already exists");
    }
    created_.push_back(spec.name());
    mycel::v1::Cell c;
    *c.mutable_spec() = spec;
    return c;
  }
  absl::Status DeleteCell(const std::string& name, bool force) override {
    if (!force) {
      return absl::FailedPreconditionError(
          absl::StrCat("cell \"", name, "\" has running executables"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<mycel::v1::Cell> GetCell(const std::string& name) override {
    return absl::NotFoundError(absl::StrCat("cell \"", name, "\" not found"));
  }
  std::vector<mycel::v1::Cell> ListCells() override {
    absl::MutexLock lock(&mu_);
    std::vector<mycel::v1::Cell> out;
    for (const std::string& n : created_) {
      out.emplace_back().mutable_spec()->set_name(n);
    }
    return out;
  }
  absl::StatusOr<mycel::v1::CellStats> Stats(const std::string&) override {
    return absl::UnavailableError("no cgroup");
  }
  absl::StatusOr<mycel::v1::Executable> Start(
      const mycel::v1::ExecutableSpec& spec,
      const cells::StartOptions&) override {
    if (spec.command().empty()) {
      return absl::InvalidArgumentError("command: must not be empty");
    }
    mycel::v1::Executable e;
    *e.mutable_spec() = spec;
    e.mutable_status()->set_state(mycel::v1::EXECUTABLE_STATE_RUNNING);
    return e;
  }
  void Stop(const std::string&, const std::string&,
            std::optional<absl::Duration>, EndCallback done) override {
    done(absl::NotFoundError("no such executable"));
  }
  absl::StatusOr<mycel::v1::Executable> Signal(const std::string&,
                                               const std::string&,
                                               int) override {
    return absl::FailedPreconditionError("not running");
  }
  absl::StatusOr<mycel::v1::Executable> Get(const std::string&,
                                            const std::string&) override {
    return absl::NotFoundError("no such executable");
  }
  absl::StatusOr<std::vector<mycel::v1::Executable>> List(
      const std::string&) override {
    return std::vector<mycel::v1::Executable>{};
  }
  EndWatch WatchEnd(const std::string& cell, const std::string& name,
                    EndCallback done) override {
    absl::MutexLock lock(&mu_);
    watches_.push_back({cell, name, std::move(done)});
    return watches_.size();
  }
  void CancelEndWatch(EndWatch id) override {
    absl::MutexLock lock(&mu_);
    if (id >= 1 && id <= watches_.size()) watches_[id - 1].done = nullptr;
  }
  std::string LogPath(const std::string&, const std::string&) const override {
    return "/nonexistent";
  }
  absl::Status FlushLog(const std::string&, const std::string&) override {
    return absl::OkStatus();
  }

  size_t watch_count() {
    absl::MutexLock lock(&mu_);
    return watches_.size();
  }
  // Ends every watched executable with exit code `code`.
  void EndAll(int code) {
    std::vector<EndCallback> callbacks;
    {
      absl::MutexLock lock(&mu_);
      for (Watch& w : watches_) {
        if (w.done) callbacks.push_back(std::move(w.done));
      }
    }
    for (EndCallback& cb : callbacks) {
      mycel::v1::Executable e;
      e.mutable_status()->set_state(mycel::v1::EXECUTABLE_STATE_EXITED);
      e.mutable_status()->set_exit_code(code);
      cb(e);
    }
  }

 private:
  struct Watch {
    std::string cell, name;
    EndCallback done;
  };
  absl::Mutex mu_;
  std::vector<std::string> created_ ABSL_GUARDED_BY(mu_);
  std::vector<Watch> watches_ ABSL_GUARDED_BY(mu_);
};

// A gRPC server with the two services over `cells`, and its event loop;
// at most `max_waits` Wait calls at once.
class Server {
 public:
  explicit Server(absl::StatusOr<cells::Cells*> cells, int max_waits = 4096)
      : work_(io_.get_executor()),
        log_streams_(1024, "log streams", "max_log_streams"),
        waits_(max_waits, "waits", "max_waits"),
        cells_service_(cells, &io_),
        exes_service_(cells, &io_, &log_streams_, &waits_) {
    loop_ = std::thread([this] { io_.run(); });
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + dir_.path() + "/sock",
                       grpc::InsecureServerCredentials());
    b.RegisterService(&cells_service_);
    b.RegisterService(&exes_service_);
    // At most four threads for the synchronous calls: the 50 Wait calls
    // below would exhaust them (RESOURCE_EXHAUSTED) if each held one.
    grpc::ResourceQuota quota("cells_service_test");
    quota.SetMaxThreads(4);
    b.SetResourceQuota(quota);
    server_ = b.BuildAndStart();
    REQUIRE(server_ != nullptr);
    auto channel = grpc::CreateChannel("unix:" + dir_.path() + "/sock",
                                       grpc::InsecureChannelCredentials());
    cells_ = mycel::v1::Cells::NewStub(channel);
    exes_ = mycel::v1::Executables::NewStub(channel);
  }
  ~Server() {
    server_->Shutdown(std::chrono::system_clock::now());
    work_.reset();
    io_.stop();
    loop_.join();
  }

  mycel::v1::Cells::Stub& cells() { return *cells_; }
  mycel::v1::Executables::Stub& exes() { return *exes_; }

 private:
  testing::TempDir dir_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work_;
  std::thread loop_;
  CallSlots log_streams_;
  CallSlots waits_;
  CellsService cells_service_;
  ExecutablesService exes_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<mycel::v1::Cells::Stub> cells_;
  std::unique_ptr<mycel::v1::Executables::Stub> exes_;
};

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
  return ctx;
}

TEST_CASE("a handler passes the request through and the answer back") {
  FakeCells fake;
  Server server(&fake);
  mycel::v1::CreateCellRequest req;
  req.mutable_spec()->set_name("web");
  mycel::v1::Cell cell;
  grpc::Status s = server.cells().Create(Ctx().get(), req, &cell);
  REQUIRE(s.ok());
  CHECK(cell.spec().name() == "web");

  mycel::v1::ListCellsResponse list;
  REQUIRE(server.cells()
              .List(Ctx().get(), mycel::v1::ListCellsRequest(), &list)
              .ok());
  REQUIRE(list.cells_size() == 1);
  CHECK(list.cells(0).spec().name() == "web");
}

TEST_CASE("the status code and message of Cells reach the client unchanged") {
  FakeCells fake;
  Server server(&fake);
  mycel::v1::CreateCellRequest create;
  create.mutable_spec()->set_name("taken");
  mycel::v1::Cell cell;
  grpc::Status s = server.cells().Create(Ctx().get(), create, &cell);
  CHECK(s.error_code() == grpc::StatusCode::ALREADY_EXISTS);
  CHECK(s.error_message() == "cell \"taken\" already exists");

  mycel::v1::GetCellRequest get;
  get.set_name("nope");
  s = server.cells().Get(Ctx().get(), get, &cell);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "cell \"nope\" not found");

  mycel::v1::DeleteCellRequest del;
  del.set_name("web");
  mycel::v1::DeleteCellResponse dresp;
  s = server.cells().Delete(Ctx().get(), del, &dresp);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  del.set_force(true);
  CHECK(server.cells().Delete(Ctx().get(), del, &dresp).ok());

  mycel::v1::StartRequest start;
  start.mutable_spec()->set_cell("web");
  mycel::v1::Executable exe;
  s = server.exes().Start(Ctx().get(), start, &exe);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "command: must not be empty");

  mycel::v1::StopRequest stop;
  stop.set_cell("web");
  stop.set_name("x");
  s = server.exes().Stop(Ctx().get(), stop, &exe);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("without cells every call answers with the reason") {
  Server server(absl::StatusOr<cells::Cells*>(
      absl::FailedPreconditionError("no cgroup hierarchy for cells")));
  mycel::v1::ListCellsResponse list;
  grpc::Status s =
      server.cells().List(Ctx().get(), mycel::v1::ListCellsRequest(), &list);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(s.error_message() == "no cgroup hierarchy for cells");
  mycel::v1::ExecutableRef ref;
  ref.set_cell("c");
  ref.set_name("e");
  mycel::v1::Executable exe;
  s = server.exes().Wait(Ctx().get(), ref, &exe);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_CASE("waiting calls hold no server thread") {
  FakeCells fake;
  Server server(&fake);
  constexpr int kWaiters = 50;
  std::vector<std::thread> waiters;
  std::vector<grpc::Status> results(kWaiters);
  std::vector<mycel::v1::Executable> exes(kWaiters);
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      mycel::v1::ExecutableRef ref;
      ref.set_cell("c");
      ref.set_name(absl::StrCat("e", i));
      results[i] = server.exes().Wait(Ctx().get(), ref, &exes[i]);
    });
  }
  // Every wait has reached the fake...
  for (int i = 0; i < 500 && fake.watch_count() < kWaiters; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(fake.watch_count() == kWaiters);
  // ...and a short call still answers, with four server threads in all.
  mycel::v1::ListCellsResponse list;
  CHECK(server.cells()
            .List(Ctx().get(), mycel::v1::ListCellsRequest(), &list)
            .ok());
  fake.EndAll(3);
  for (std::thread& t : waiters) t.join();
  for (int i = 0; i < kWaiters; ++i) {
    CHECK(results[i].ok());
    CHECK(exes[i].status().exit_code() == 3);
  }
}

TEST_CASE(
    "waits beyond a caller's half of max_waits are refused until one ends") {
  // Each open Wait holds memory until its executable ends or its client
  // goes: 100,000 over one connection took a node from 15 to 625 MB.
  FakeCells fake;
  // All of this test's calls are one caller's (the insecure socket's),
  // which may hold half of the node's waits.
  Server server(&fake, /*max_waits=*/6);
  std::vector<std::thread> waiters;
  std::vector<grpc::Status> results(3);
  std::vector<mycel::v1::Executable> exes(3);
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      mycel::v1::ExecutableRef ref;
      ref.set_cell("c");
      ref.set_name(absl::StrCat("e", i));
      results[i] = server.exes().Wait(Ctx().get(), ref, &exes[i]);
    });
  }
  for (int i = 0; i < 500 && fake.watch_count() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(fake.watch_count() == 3);
  mycel::v1::ExecutableRef ref;
  ref.set_cell("c");
  ref.set_name("e3");
  mycel::v1::Executable out;
  grpc::Status refused = server.exes().Wait(Ctx().get(), ref, &out);
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(refused.error_message() ==
        "wait: this caller holds 3 of the node's 6 waits already, the most "
        "one caller may while others hold 0 (half of what they leave of "
        "max_waits); close one, or retry later");
  CHECK(fake.watch_count() == 3);
  fake.EndAll(0);
  for (std::thread& t : waiters) t.join();
  for (const grpc::Status& s : results) CHECK(s.ok());
  // Their places are free again once the calls are done.
  grpc::Status again;
  std::thread waiter(
      [&] { again = server.exes().Wait(Ctx().get(), ref, &out); });
  for (int i = 0; i < 500 && fake.watch_count() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(fake.watch_count() == 4);
  fake.EndAll(7);
  waiter.join();
  CHECK(again.ok());
  CHECK(out.status().exit_code() == 7);
}

TEST_CASE("one caller may hold half of the slots; the others keep the rest") {
  auto slots = std::make_unique<CallSlots>(4, "log streams", "max_log_streams");
  CHECK(slots->reserve() == 0);
  std::vector<CallSlots::Slot> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<CallSlots::Slot> s = slots->Take("logs", "spiffe://m/a");
    REQUIRE(s.ok());
    held.push_back(*std::move(s));
  }
  absl::StatusOr<CallSlots::Slot> third = slots->Take("logs", "spiffe://m/a");
  CHECK(third.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(third.status().message() ==
        "logs: this caller holds 2 of the node's 4 log streams already, the "
        "most one caller may while others hold 0 (half of what they leave of "
        "max_log_streams); close one, or retry later");
  // Others get the rest, then the node is full for everyone.
  for (const char* caller : {"", "spiffe://m/b"}) {
    absl::StatusOr<CallSlots::Slot> s = slots->Take("logs", caller);
    REQUIRE(s.ok());
    held.push_back(*std::move(s));
  }
  CHECK(slots->open() == 4);
  absl::StatusOr<CallSlots::Slot> full = slots->Take("logs", "spiffe://m/c");
  CHECK(full.status().message() ==
        "logs: 4 log streams are open on this node already "
        "(max_log_streams); close one, or retry later");
  // A slot given back is free again (not for its caller, which holds
  // half of what the two others leave); a moved-from slot gives back
  // nothing.
  CallSlots::Slot moved = std::move(held[0]);
  held.erase(held.begin());
  CHECK(slots->open() == 4);
  { CallSlots::Slot gone = std::move(moved); }
  CHECK(slots->open() == 3);
  CHECK_FALSE(slots->Take("logs", "spiffe://m/a").ok());
  CHECK(slots->Take("logs", "spiffe://m/c").ok());
  CHECK(slots->open() == 3);
  // A cap of 1 still admits one call.
  CallSlots one(1, "waits", "max_waits");
  absl::StatusOr<CallSlots::Slot> only = one.Take("wait", "");
  CHECK(only.ok());
  CHECK_FALSE(one.Take("wait", "spiffe://m/b").ok());
  // Slots may outlive their CallSlots (a reactor's state can go with the
  // event loop, after the daemon's members).
  slots.reset();
  held.clear();
}

TEST_CASE(
    "callers over TCP share what the others leave, and never take the "
    "local socket's eighth") {
  // With half of the cap each, two callers together held every slot: two
  // certificates that leak or hold their calls left the node's operator
  // no log to follow.
  CallSlots slots(64, "log streams", "max_log_streams");
  CHECK(slots.reserve() == 8);
  std::vector<CallSlots::Slot> held;
  // Takes slots for `caller` until refused; how many it got.
  auto fill = [&](const std::string& caller) {
    int got = 0;
    for (;;) {
      absl::StatusOr<CallSlots::Slot> s = slots.Take("logs", caller);
      if (!s.ok()) {
        CHECK(s.status().code() == absl::StatusCode::kResourceExhausted);
        return got;
      }
      held.push_back(*std::move(s));
      ++got;
    }
  };
  // Over TCP a caller's room is 56 of the 64: alone it gets half.
  CHECK(fill("spiffe://m/user/a") == 28);
  absl::StatusOr<CallSlots::Slot> more =
      slots.Take("logs", "spiffe://m/user/a");
  CHECK(more.status().message() ==
        "logs: this caller holds 28 of the node's 64 log streams already, the "
        "most one caller may while others hold 0 (half of what they leave of "
        "max_log_streams); close one, or retry later");
  // A second gets half of what the first leaves, a third half of the rest.
  CHECK(fill("spiffe://m/user/b") == 14);
  CHECK(fill("spiffe://m/user/c") == 7);
  // However many come, they stop at 56.
  for (int i = 0; i < 20; ++i) fill(absl::StrCat("spiffe://m/user/x", i));
  CHECK(slots.open() == 56);
  absl::StatusOr<CallSlots::Slot> kept = slots.Take("logs", "spiffe://m/u/y");
  CHECK(kept.status().message() ==
        "logs: 56 of the node's 64 log streams are open, and the other 8 are "
        "kept for its local socket (max_log_streams); close one, or retry "
        "later");
  // The local socket gets its eighth, and a share of what it frees.
  CHECK(fill("") == 4);
  CHECK(slots.open() == 60);
  CHECK(fill("") == 0);
  held.clear();
  CHECK(slots.open() == 0);
}

}  // namespace
}  // namespace mycel
