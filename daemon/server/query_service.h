// The mycel.v1.Query gRPC service: read-only SQL over this node's replica
// (daemon/store/query.h).
#ifndef MYCEL_DAEMON_SERVER_QUERY_SERVICE_H_
#define MYCEL_DAEMON_SERVER_QUERY_SERVICE_H_

#include "daemon/store/store.h"
#include "mycel/v1/query.grpc.pb.h"

namespace mycel {

// Thread-safe. `store` must outlive it. A query runs on the calling gRPC
// thread, for at most its time limit (it computes; it never waits).
class QueryService final : public mycel::v1::Query::Service {
 public:
  explicit QueryService(store::Store* store) : store_(store) {}

  grpc::Status Run(grpc::ServerContext*, const mycel::v1::QueryRequest*,
                   mycel::v1::QueryResponse*) override;

 private:
  store::Store* const store_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_QUERY_SERVICE_H_
