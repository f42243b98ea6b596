// Query.Run's admission: at most QueryService::kMaxRunningQueries at once,
// at most kMaxWaitingQueries wait up to their own time limit and are then
// refused; the rest are refused at once.
#include "daemon/server/query_service.h"

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "daemon/store/store.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

TEST_CASE("the gate lets a waiter in when a place frees, refuses it after") {
  QueryGate gate(2, 100);
  auto never = [] { return false; };
  REQUIRE(gate.Enter(absl::ZeroDuration(), never).ok());
  REQUIRE(gate.Enter(absl::ZeroDuration(), never).ok());
  CHECK(gate.running() == 2);

  const absl::Time start = absl::Now();
  absl::Status full = gate.Enter(absl::Milliseconds(150), never);
  CHECK(absl::Now() - start >= absl::Milliseconds(150));
  CHECK(absl::IsResourceExhausted(full));
  CHECK(absl::StrContains(full.message(), "2 queries are running"));

  // A caller gone is told at once, not after its wait.
  const absl::Time before_cancel = absl::Now();
  absl::Status gone = gate.Enter(absl::Seconds(10), [] { return true; });
  CHECK(absl::IsCancelled(gone));
  CHECK(absl::Now() - before_cancel < absl::Seconds(2));

  // A waiter gets the place one gives back.
  std::atomic<bool> entered{false};
  std::thread waiter(
      [&] { entered = gate.Enter(absl::Seconds(10), never).ok(); });
  absl::SleepFor(absl::Milliseconds(100));
  CHECK(!entered);
  gate.Leave();
  waiter.join();
  CHECK(entered);
  CHECK(gate.running() == 2);
}

TEST_CASE("the gate refuses at once when as many as it allows wait") {
  // A waiting query holds its gRPC thread: the waiters are bounded, and a
  // query past them is refused at once rather than held.
  QueryGate gate(1, 1);
  auto never = [] { return false; };
  REQUIRE(gate.Enter(absl::ZeroDuration(), never).ok());
  absl::Status waited;
  std::thread waiter([&] { waited = gate.Enter(absl::Seconds(10), never); });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (gate.waiting() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  REQUIRE(gate.waiting() == 1);
  const absl::Time start = absl::Now();
  absl::Status refused = gate.Enter(absl::Seconds(10), never);
  CHECK(absl::Now() - start < absl::Seconds(1));
  CHECK(absl::IsResourceExhausted(refused));
  CHECK(refused.message() ==
        "query: 1 queries are running and 1 wait already, the most this "
        "node takes at once; try again later");
  // The waiter still gets the place given back; nothing is left counted.
  gate.Leave();
  waiter.join();
  CHECK(waited.ok());
  CHECK(gate.running() == 1);
  CHECK(gate.waiting() == 0);
  gate.Leave();
  CHECK(gate.running() == 0);
}

TEST_CASE("Query.Run runs at most four queries at once and says so") {
  testing::TempDir dir;
  auto store = store::Store::Open(dir.Sub("q.db"), {.origin = "n1"});
  REQUIRE(store.ok());
  QueryService service(store->get());
  const int n = QueryService::kMaxRunningQueries;
  REQUIRE(n == 4);

  // Four queries that run to their time limit.
  std::vector<grpc::Status> slow(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      grpc::ServerContext ctx;
      mycel::v1::QueryRequest req;
      req.set_sql(
          "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
          "SELECT count(*) FROM c");
      req.set_timeout_ms(2000);
      mycel::v1::QueryResponse resp;
      slow[i] = service.Run(&ctx, &req, &resp);
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (service.running() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  REQUIRE(service.running() == n);

  // A fifth waits its own time limit, then is refused.
  grpc::ServerContext ctx;
  mycel::v1::QueryRequest quick;
  quick.set_sql("SELECT 1");
  quick.set_timeout_ms(200);
  mycel::v1::QueryResponse resp;
  grpc::Status refused = service.Run(&ctx, &quick, &resp);
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(absl::StrContains(refused.error_message(),
                          "4 queries are running, the most this node runs"));
  CHECK(resp.rows_size() == 0);

  for (std::thread& t : threads) t.join();
  for (const grpc::Status& s : slow) {
    CHECK(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  CHECK(service.running() == 0);
  grpc::ServerContext again;
  grpc::Status ok = service.Run(&again, &quick, &resp);
  CHECK_MESSAGE(ok.ok(), ok.error_message());
  CHECK(resp.rows_size() == 1);
}

}  // namespace
}  // namespace mycel
