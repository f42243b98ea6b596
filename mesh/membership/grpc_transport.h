// GrpcTransport: the membership Transport (driver_transport.h) over the
// Gossip service (proto/mycel/v1/gossip.proto), on mutual-TLS channels
// whose server must prove the member name the driver meant to reach
// (identity::PeerChannels makes such channels).
//
// Messages travel on links: one Gossip.Link stream per pair of nodes, kept
// open, written by both sides. A node sends to a peer on any open link with
// it, the one it dialed or the one the peer dialed; it dials only when there
// is none. So a mesh of N nodes needs about N(N-1)/2 connections rather than
// N(N-1), each message costs an HTTP/2 DATA frame rather than a call (its
// headers and trailers), and on a 50-node mesh starting on one host half the
// TLS handshakes and channel set-ups go (each channel builds its own
// OpenSSL context in gRPC 1.51: about a millisecond of CPU).
//
// A frame not written within its deadline fails with DEADLINE_EXCEEDED; a
// link whose frame in writing passes its deadline is stuck (a peer that
// stopped reading, a connection that never came up) and is closed, failing
// what it holds. Peer channels also set TCP_USER_TIMEOUT (PeerChannels), so a
// connection whose data goes unacknowledged (a partition) is torn down and
// the next send dials afresh. A server that has no Link method (an older
// myceld) gets one unary Exchange per message, as before links.
//
// A link is a pair of streams when both ends can pair (proto: Gossip.Link):
// each node writes its own messages on one stream and answers on the
// other's, and reads the stream its answers come on only while it awaits
// one. gRPC 1.51 sends a stream's WINDOW_UPDATE in a TLS record of its own
// whenever a read starts on a stream that took in data; on a single stream
// read at all times, the prober sends one after every ack (48 bytes, about
// a fifth of what a node sends at rest). Not read until the next probe, the
// stream's update rides on that probe's ping instead.
#ifndef MYCEL_MESH_MEMBERSHIP_GRPC_TRANSPORT_H_
#define MYCEL_MESH_MEMBERSHIP_GRPC_TRANSPORT_H_

#include <grpcpp/channel.h>
#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mesh/identity/trust.h"
#include "mesh/membership/driver_transport.h"
#include "mycel/v1/gossip.pb.h"
#include "runtime/clock.h"

namespace mycel::membership {

// Thread-safe. Sends never block. Links still open when the transport is
// destroyed are cancelled; calls and links own their state, and the
// driver's `done` callbacks tolerate a driver that is gone.
class GrpcTransport final : public Transport {
 public:
  // A channel to node `name` (empty: any node of the mesh) at `address`, or
  // null when none can be made (e.g. the credentials cannot be read).
  using ChannelSource = std::function<std::shared_ptr<grpc::Channel>(
      absl::string_view name, absl::string_view address)>;
  // A message that arrived on a link from node `peer` (as its certificate
  // names it). `reply` writes the direct answer, if any, back on the same
  // link; call it at most once (an empty answer writes nothing).
  using Inbound = std::function<void(std::string peer, std::string bytes,
                                     std::function<void(std::string)> reply)>;

  struct Options {
    ChannelSource channels;
    // Where messages arriving on links go. Without it they are dropped.
    Inbound inbound;
    // Required: the deadlines of frames waiting on links.
    Clock* clock = nullptr;
    // When set, a link's peer is checked again, as a call's caller is at
    // every call, before a frame from it is taken: at least every
    // `recheck_interval` and whenever the trust changes (a revocation, a
    // new CA). A peer refused (revoked, expired, not a node, another
    // name) has its link closed (PERMISSION_DENIED) and the frame dropped.
    // A dialed link's server is checked so too when it comes up.
    const identity::Trust* trust = nullptr;
    absl::Duration recheck_interval = absl::Minutes(1);
    // Links kept open; beyond, the least recently used is closed. With one
    // peer, at most two (one dialed each way): a third closes its oldest.
    size_t max_links = 256;
    // Frames waiting on one link; beyond, a send fails at once
    // (RESOURCE_EXHAUSTED).
    size_t max_queued_per_link = 256;
    // How long a direct answer may wait to be written.
    absl::Duration reply_deadline = absl::Seconds(10);
    // A link whose frame in writing has waited this long is stuck (the peer
    // stopped reading, or the connection never came up) and is closed.
    absl::Duration stuck_timeout = absl::Seconds(10);
  };

  struct Stats {
    int64_t links_open = 0;
    int64_t links_dialed = 0;    // ever
    int64_t links_accepted = 0;  // ever
    int64_t links_stuck = 0;     // closed for a frame past its deadline
    int64_t links_evicted = 0;   // closed for max_links
    int64_t links_refused = 0;   // closed: the peer no longer passes
    int64_t frames_written = 0;
    int64_t frames_received = 0;
    int64_t frames_expired = 0;  // failed before they were written
    int64_t unary_sends = 0;     // to servers without Link
    int64_t links_paired = 0;    // ever: links that became a pair of streams
  };

  explicit GrpcTransport(Options options);
  ~GrpcTransport() override;
  GrpcTransport(const GrpcTransport&) = delete;
  GrpcTransport& operator=(const GrpcTransport&) = delete;

  void Send(absl::string_view peer, absl::string_view address,
            std::string bytes, absl::Duration deadline, bool awaits_answer,
            SendDone done) override;

  // The server end of a Gossip.Link dialed by node `peer` (the name in its
  // client certificate, which Options::trust accepted at its generation
  // `admitted_at`): registers the link for sends to `peer` and hands what
  // arrives on it to Options::inbound. A second stream for a link of the
  // same peer ("mycel-link-for") pairs with it; one for no such link is
  // refused (FAILED_PRECONDITION). gRPC owns the reactor until its OnDone.
  grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>*
  Accept(grpc::CallbackServerContext* context, std::string peer,
         uint64_t admitted_at);

  // A server end that finishes a link at once with `status` (a caller
  // refused before any link is made). gRPC owns it.
  static grpc::ServerBidiReactor<mycel::v1::GossipFrame,
                                 mycel::v1::GossipFrame>*
  Refuse(grpc::Status status);

  // Closes every link and drops what arrives later. Idempotent; the
  // destructor calls it.
  void Shutdown();

  // Unary calls started and not completed yet (the fallback path).
  int64_t in_flight() const { return in_flight_->load(); }
  Stats stats() const;
  // One line per link: its peer, its state, what waits on it. For logs and
  // test failures.
  std::string DescribeLinks() const;

  struct Hub;  // the links and counters, shared with the links themselves

 private:
  // Accept's second stream of link `link_id`.
  grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>*
  AcceptSecond(grpc::CallbackServerContext* context, std::string peer,
               uint64_t admitted_at, uint64_t link_id);
  void SendUnary(absl::string_view peer, absl::string_view address,
                 std::string bytes, absl::Duration deadline, SendDone done);

  Options options_;
  std::shared_ptr<Hub> hub_;
  // Shared with the calls, which may complete after the transport is gone.
  std::shared_ptr<std::atomic<int64_t>> in_flight_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_GRPC_TRANSPORT_H_
