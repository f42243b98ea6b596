// The seam between the membership driver and the network. The driver hands
// the transport encoded GossipMessages to send and is handed the bytes that
// arrive, with the identity the transport authenticated; it never sees a
// socket. Two implementations: the gRPC Gossip service over the identity
// layer's mTLS channels (the daemon), and LoopbackNetwork
// (driver_loopback.h), in-process, for tests.
#ifndef MYCEL_MESH_MEMBERSHIP_DRIVER_TRANSPORT_H_
#define MYCEL_MESH_MEMBERSHIP_DRIVER_TRANSPORT_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mycel::membership {

// Thread-safe.
class Transport {
 public:
  // The peer's direct answer to a message (an ack, a push-pull answer),
  // when it came back with the message's acceptance: one encoded
  // GossipMessage from the node `from`, as its certificate names it. Empty
  // when there is none.
  struct Reply {
    std::string from;
    std::string bytes;
  };
  // Called exactly once per Send, from any thread, possibly before Send
  // returns: OK when the peer accepted the message, else why not
  // (UNAVAILABLE when it could not be reached, DEADLINE_EXCEEDED, ...),
  // with the peer's direct answer if any.
  using SendDone = std::function<void(absl::Status, Reply)>;

  virtual ~Transport() = default;

  // Sends `bytes`, one encoded mycel.v1.GossipMessage, to the node at
  // `address` ("host:port"). `peer` is the member's name, whose identity
  // the peer's certificate must carry (the transport must refuse a peer
  // that proves another name); it is empty for a seed known only by its
  // address, where any member certificate of the mesh is accepted.
  //
  // Must not block: it queues or starts the send and returns. The driver
  // bounds what it has in flight per address (DriverOptions), so a
  // transport may simply start every send it is given. A send not accepted
  // within `deadline` (connecting included) fails with DEADLINE_EXCEEDED:
  // the probe timeout for a probe's messages, whose answer is useless
  // later, and Config::delivery_timeout for the rest.
  //
  // `awaits_answer`: the peer answers the message directly (an ack to a
  // ping, the answer to a push-pull request), within `deadline` if at all.
  // A transport may watch for answers only while one is awaited (the gRPC
  // links do, to save a TLS record per probe), so an answered message sent
  // without it may be delivered late.
  virtual void Send(absl::string_view peer, absl::string_view address,
                    std::string bytes, absl::Duration deadline,
                    bool awaits_answer, SendDone done) = 0;
};

// Incoming messages reach the driver through MembershipDriver::Deliver
// (driver.h), with the peer name taken from the verified client
// certificate, never from the message.

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_DRIVER_TRANSPORT_H_
