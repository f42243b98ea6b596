// LoopbackNetwork: an in-process Transport for tests of the driver. Each
// node attaches at an address with its name; a send to an address is
// handed straight to the receiver's Deliver, authenticated as the sender's
// name (what mTLS would prove). A node can be cut off (everything to and
// from it dropped, as when it has crashed or its link is down).
#ifndef MYCEL_MESH_MEMBERSHIP_DRIVER_LOOPBACK_H_
#define MYCEL_MESH_MEMBERSHIP_DRIVER_LOOPBACK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "mesh/membership/driver_transport.h"

namespace mycel::membership {

// Thread-safe. Must outlive the transports it makes.
class LoopbackNetwork {
 public:
  // Receives (authenticated sender name, bytes); must not block.
  using Receiver = std::function<void(std::string, std::string)>;

  LoopbackNetwork() = default;
  LoopbackNetwork(const LoopbackNetwork&) = delete;
  LoopbackNetwork& operator=(const LoopbackNetwork&) = delete;

  // The transport of node `name`, reachable at `address` once a receiver
  // is attached there.
  std::unique_ptr<Transport> Endpoint(std::string name, std::string address);
  // Messages to `address` go to `receiver` (replacing any before).
  void Attach(const std::string& address, Receiver receiver);
  void Detach(const std::string& address);
  // Drops every message to or from `address` while set.
  void SetCut(const std::string& address, bool cut);

  uint64_t delivered() const;
  uint64_t dropped() const;

 private:
  class Link;
  void Route(const std::string& from_name, const std::string& from_address,
             absl::string_view address, std::string bytes,
             Transport::SendDone done);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Receiver> receivers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> cut_ ABSL_GUARDED_BY(mu_);
  uint64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_DRIVER_LOOPBACK_H_
