// The mycel.v1.Node gRPC service.
#ifndef MYCEL_DAEMON_SERVER_NODE_SERVICE_H_
#define MYCEL_DAEMON_SERVER_NODE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mycel/v1/node.grpc.pb.h"
#include "runtime/host_info.h"

namespace mycel {

// Thread-safe: all state is fixed at construction. `on_shutdown` is called
// from a gRPC thread after the reply is queued; it must not block.
class NodeService final : public mycel::v1::Node::Service {
 public:
  struct Params {
    std::string node_name;
    std::string state_dir;
    int schema_version = 0;
    HostInfo host;
    absl::Time started;
    std::string init_role;
    std::string safe_mode;
    // Kernel boot → process start; known at construction.
    absl::Duration boot_to_start;
    std::function<void(mycel::v1::ShutdownMode)> on_shutdown;
    // Orphans reaped so far (may be empty).
    std::function<uint64_t()> orphans_reaped;
    // The node's counters, in any order (GetStats; may be empty).
    std::function<
        absl::StatusOr<std::vector<std::pair<std::string, int64_t>>>()>
        counters;
  };

  explicit NodeService(Params params) : params_(std::move(params)) {}

  // Records how long the process took from its start to serving.
  void SetStartToReady(absl::Duration d) {
    start_to_ready_ns_.store(absl::ToInt64Nanoseconds(d));
  }

  grpc::Status GetInfo(grpc::ServerContext* ctx,
                       const mycel::v1::GetInfoRequest* req,
                       mycel::v1::NodeInfo* resp) override;
  grpc::Status Shutdown(grpc::ServerContext* ctx,
                        const mycel::v1::ShutdownRequest* req,
                        mycel::v1::ShutdownResponse* resp) override;
  // INVALID_ARGUMENT for a prefix over 256 bytes; the counters' error
  // (UNAVAILABLE while the daemon stops).
  grpc::Status GetStats(grpc::ServerContext* ctx,
                        const mycel::v1::GetStatsRequest* req,
                        mycel::v1::NodeStats* resp) override;

 private:
  const Params params_;
  std::atomic<int64_t> start_to_ready_ns_{0};
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_NODE_SERVICE_H_
