// The mycel.v1.Query gRPC service: read-only SQL over this node's replica
// (daemon/store/query.h).
#ifndef MYCEL_DAEMON_SERVER_QUERY_SERVICE_H_
#define MYCEL_DAEMON_SERVER_QUERY_SERVICE_H_

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"
#include "mycel/v1/query.grpc.pb.h"

namespace mycel {

// How many queries run at once, and how many wait. Each copies its
// relations (the kv namespace, the change log...) and holds a CPU for up
// to its time limit, so without a bound a caller with the `read` rule
// could run hundreds at once (one per gRPC thread) and take the node's
// memory and CPUs. A query waits on its gRPC thread, so the waiters are
// bounded too: 600 slow queries, 247 of them waiting, held every thread of
// the endpoint's synchronous server (256), and calls of every other kind
// made meanwhile were refused with "Server Threadpool Exhausted".
// Thread-safe.
class QueryGate {
 public:
  QueryGate(int max_running, int max_waiting)
      : max_running_(max_running), max_waiting_(max_waiting) {}

  // Takes a place, waiting up to `wait` for one to free up. Past it,
  // RESOURCE_EXHAUSTED saying how many run; at once when max_waiting
  // queries wait already; CANCELLED as soon as `cancelled` says the caller
  // went away (asked every 50 ms).
  absl::Status Enter(absl::Duration wait, absl::FunctionRef<bool()> cancelled);
  // Gives back a place Enter took.
  void Leave();

  int running() const;
  int waiting() const;

 private:
  const int max_running_;
  const int max_waiting_;
  mutable absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

// Thread-safe. `store` must outlive it. A query runs on the calling gRPC
// thread, for at most its time limit (it computes; it never waits), once
// the gate lets it: at most kMaxRunningQueries at once; a query that finds
// them all taken waits for a place up to its own time limit, unless
// kMaxWaitingQueries wait already, and then it is refused at once.
class QueryService final : public mycel::v1::Query::Service {
 public:
  static constexpr int kMaxRunningQueries = 4;
  static constexpr int kMaxWaitingQueries = 16;

  explicit QueryService(store::Store* store)
      : store_(store), gate_(kMaxRunningQueries, kMaxWaitingQueries) {}

  grpc::Status Run(grpc::ServerContext*, const mycel::v1::QueryRequest*,
                   mycel::v1::QueryResponse*) override;

  // Queries running and waiting now (tests).
  int running() const { return gate_.running(); }
  int waiting() const { return gate_.waiting(); }

 private:
  store::Store* const store_;
  QueryGate gate_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_QUERY_SERVICE_H_
