// Membership over the real wire, in one process: NodeMembership (the
// driver, the node-key signer, the mesh-CA verifier, GrpcTransport over
// PeerChannels) behind a real gRPC server with the daemon's mutual-TLS
// credentials, Authorizer and GossipService, on 127.0.0.1. Nodes join
// through a seed and see each other alive; a frame whose `from` is not the
// sender's certificate is refused; a user or an unauthenticated client
// cannot gossip; a channel to an address that another node holds is
// refused during the handshake.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/server/credentials.h"
#include "daemon/server/gossip_service.h"
#include "mesh/identity/access_rules.h"
#include "mesh/identity/authorizer.h"
#include "mesh/identity/peer_channels.h"
#include "mesh/identity/trust.h"
#include "mesh/membership/codec.h"
#include "mesh/membership/grpc_transport.h"
#include "mesh/membership/node_membership.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/private_key.h"
#include "mycel/v1/gossip.grpc.pb.h"
#include "runtime/asio_clock.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

template <typename T>
T Must(absl::StatusOr<T> v) {
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *std::move(v);
}

// Polls `done` every 20 ms; the time it took, or nullopt at `limit`.
std::optional<absl::Duration> WaitFor(const std::function<bool()>& done,
                                      absl::Duration limit) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < limit) {
    if (done()) return absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return std::nullopt;
}

// A CA and PEM files for its identities in one directory.
class Pki {
 public:
  explicit Pki(const std::string& dir)
      : dir_(dir),
        ca_(Must(pki::CertificateAuthority::Create("prod", absl::Now()))) {
    REQUIRE(
        WriteFileAtomic(ca_file(), Must(ca_.certificate().ToPem()), 0644).ok());
  }
  std::string ca_file() const { return dir_ + "/ca.crt"; }
  std::string cert_file(const std::string& name) const {
    return dir_ + "/" + name + ".crt";
  }
  std::string key_file(const std::string& name) const {
    return dir_ + "/" + name + ".key";
  }
  std::string ca_pem() const { return Must(ca_.certificate().ToPem()); }
  // Issues `name` a certificate of `kind` and writes its files.
  void Issue(const std::string& name,
             pki::IdentityKind kind = pki::IdentityKind::kNode) {
    pki::PrivateKey key = Must(pki::PrivateKey::Generate());
    pki::SpiffeId id = Must(pki::SpiffeId::Create(kind, "prod", name));
    pki::Role role =
        kind == pki::IdentityKind::kNode ? pki::Role::kNode : pki::Role::kAdmin;
    pki::Certificate cert = Must(ca_.IssueForKey(
        Must(key.GetPublicKey()), pki::Grant{id, role}, absl::Now()));
    REQUIRE(WriteFileAtomic(cert_file(name), Must(cert.ToPem()), 0644).ok());
    REQUIRE(key.WriteToFile(key_file(name)).ok());
  }

 private:
  std::string dir_;
  pki::CertificateAuthority ca_;
};

// An io_context run by two threads, as the daemon's loop is.
class Loop {
 public:
  Loop() : guard_(boost::asio::make_work_guard(io)) {
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io.run(); });
  }
  ~Loop() {
    guard_.reset();
    io.stop();
    for (std::thread& t : threads_) t.join();
  }
  boost::asio::io_context io;
  AsioClock clock{&io};

 private:
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      guard_;
  std::vector<std::thread> threads_;
};

// One node: trust, a TLS gRPC server with the Gossip service, membership.
class Node {
 public:
  Node(const Pki& pki, std::string name, Loop* loop)
      : name_(std::move(name)), pki_(pki), loop_(loop) {
    REQUIRE(trust_.SetCa(pki.ca_pem()).ok());
    authz_ = std::make_shared<identity::Authorizer>(
        identity::Authorizer::Endpoint::kTcp, &trust_,
        &identity::AccessRules::Builtin(), &loop->clock);
    TlsFiles files;
    files.cert_file = pki.cert_file(name_);
    files.key_file = pki.key_file(name_);
    files.ca_file = pki.ca_file();
    files.cert = Must(ReadFile(files.cert_file));
    files.key = Must(ReadFile(files.key_file));
    files.ca = Must(ReadFile(files.ca_file));
    std::shared_ptr<grpc::ServerCredentials> creds =
        MtlsServerCredentials(files, absl::Minutes(1));
    creds->SetAuthMetadataProcessor(authz_);
    service_ = std::make_unique<GossipService>(authz_.get(), &membership_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", creds, &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    REQUIRE(port_ > 0);
  }
  ~Node() {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    membership_.Stop();
  }

  absl::Status Start(std::vector<std::string> seeds) {
    membership::NodeMembership::Options o;
    o.name = name_;
    o.advertise = address();
    o.seeds = std::move(seeds);
    o.ca_file = pki_.ca_file();
    o.cert_file = pki_.cert_file(name_);
    o.key_file = pki_.key_file(name_);
    o.trust = &trust_;
    o.clock = &loop_->clock;
    o.io = &loop_->io;
    return membership_.Start(std::move(o));
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  membership::NodeMembership& membership() { return membership_; }
  uint64_t denied() const { return authz_->denied(); }

  // How many members this node sees alive (itself included).
  int Alive() {
    absl::StatusOr<std::vector<membership::MemberInfo>> members =
        membership_.Members();
    if (!members.ok()) return 0;
    int n = 0;
    for (const auto& m : *members) {
      n += m.state == membership::MemberState::kAlive;
    }
    return n;
  }

 private:
  std::string name_;
  const Pki& pki_;
  Loop* loop_;
  identity::Trust trust_;
  std::shared_ptr<identity::Authorizer> authz_;
  membership::NodeMembership membership_;
  std::unique_ptr<GossipService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A Gossip stub that presents `who`'s certificate (none when empty) and
// accepts any node of the mesh as the server.
std::unique_ptr<mycel::v1::Gossip::Stub> StubAs(const Pki& pki,
                                                const std::string& who,
                                                const std::string& address) {
  if (who.empty()) {
    return mycel::v1::Gossip::NewStub(grpc::CreateChannel(
        address,
        identity::PinnedCaCredentials(pki.ca_pem(), "spiffe://prod/node/")));
  }
  return mycel::v1::Gossip::NewStub(grpc::CreateChannel(
      address, identity::NodeCredentialsFromFiles(
                   pki.ca_file(), pki.cert_file(who), pki.key_file(who),
                   absl::Minutes(1), "spiffe://prod/node/")));
}

grpc::Status Exchange(mycel::v1::Gossip::Stub& stub,
                      const membership::Message& message) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  mycel::v1::GossipFrame frame;
  frame.set_message(membership::EncodeMessage(message));
  mycel::v1::GossipFrameAck ack;
  return stub.Exchange(&ctx, frame, &ack);
}

TEST_CASE("three nodes join through a seed over mTLS and see each other") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2", "n3"}) pki.Issue(n);
  Loop loop;
  Node n1(pki, "n1", &loop), n2(pki, "n2", &loop), n3(pki, "n3", &loop);
  REQUIRE(n1.Start({}).ok());
  REQUIRE(n2.Start({n1.address()}).ok());
  REQUIRE(n3.Start({n1.address()}).ok());
  std::optional<absl::Duration> took = WaitFor(
      [&] { return n1.Alive() == 3 && n2.Alive() == 3 && n3.Alive() == 3; },
      absl::Seconds(15));
  REQUIRE_MESSAGE(took.has_value(), "n1 ", n1.Alive(), " n2 ", n2.Alive(),
                  " n3 ", n3.Alive());
  MESSAGE("3 nodes converged in ", absl::FormatDuration(*took));
  membership::DriverStats stats = Must(n1.membership().Stats());
  CHECK(stats.messages_received > 0);
  CHECK(stats.messages_rejected == 0);
  CHECK(stats.membership.alive_rejected_signature == 0);
  // The addresses peers learnt are the advertised ones.
  for (const auto& m : Must(n2.membership().Members())) {
    if (m.name == "n3") {
      REQUIRE(!m.addresses.empty());
      CHECK(m.addresses[0] == n3.address());
    }
  }
}

TEST_CASE("a frame whose sender is not the certificate's node is refused") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2", "n3"}) pki.Issue(n);
  Loop loop;
  Node n1(pki, "n1", &loop);
  REQUIRE(n1.Start({}).ok());
  auto as_n2 = StubAs(pki, "n2", n1.address());

  // n2 (its certificate) says it is n3 and pings n1.
  membership::Message forged;
  forged.from = "n3";
  forged.body = membership::Ping{1, "n1"};
  grpc::Status s = Exchange(*as_n2, forged);
  // The frame is queued before it is parsed: the refusal is counted.
  CHECK(s.ok());
  REQUIRE(WaitFor(
      [&] {
        return Must(n1.membership().Stats())
                   .membership.rejected_sender_mismatch == 1;
      },
      absl::Seconds(5)));
  CHECK(Must(n1.membership().Stats()).messages_rejected == 1);
  for (const auto& m : Must(n1.membership().Members())) CHECK(m.name == "n1");

  // The same ping in its own name is accepted.
  membership::Message honest = forged;
  honest.from = "n2";
  CHECK(Exchange(*as_n2, honest).ok());
  REQUIRE(WaitFor(
      [&] { return Must(n1.membership().Stats()).messages_received >= 2; },
      absl::Seconds(5)));
  CHECK(Must(n1.membership().Stats()).messages_rejected == 1);
}

TEST_CASE("users and clients without a certificate cannot gossip") {
  testing::TempDir dir;
  Pki pki(dir.path());
  pki.Issue("n1");
  pki.Issue("alice", pki::IdentityKind::kUser);
  Loop loop;
  Node n1(pki, "n1", &loop);
  REQUIRE(n1.Start({}).ok());
  membership::Message m;
  m.from = "alice";
  m.body = membership::Ping{1, "n1"};

  auto as_user = StubAs(pki, "alice", n1.address());
  grpc::Status s = Exchange(*as_user, m);
  CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(s.error_message().find("a node of the mesh") != std::string::npos);

  auto anonymous = StubAs(pki, "", n1.address());
  s = Exchange(*anonymous, m);
  CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(n1.denied() == 2);
  CHECK(Must(n1.membership().Stats()).messages_received == 0);
}

TEST_CASE("gossip before membership runs is FAILED_PRECONDITION") {
  testing::TempDir dir;
  Pki pki(dir.path());
  pki.Issue("n1");
  pki.Issue("n2");
  Loop loop;
  Node n1(pki, "n1", &loop);
  membership::Message m;
  m.from = "n2";
  m.body = membership::Ping{1, "n1"};
  grpc::Status s = Exchange(*StubAs(pki, "n2", n1.address()), m);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(s.error_message().find("membership is not running") !=
        std::string::npos);
  CHECK(n1.membership().Members().status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("GrpcTransport: a send to a name the server cannot prove fails") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2"}) pki.Issue(n);
  Loop loop;
  Node n1(pki, "n1", &loop);
  REQUIRE(n1.Start({}).ok());
  identity::PeerChannels channels({.mesh = "prod",
                                   .ca_file = pki.ca_file(),
                                   .cert_file = pki.cert_file("n2"),
                                   .key_file = pki.key_file("n2")});
  membership::GrpcTransport transport(
      {.channels = [&](absl::string_view name, absl::string_view address) {
        return channels.Get(name, address);
      }});
  membership::Message m;
  m.from = "n2";
  m.body = membership::Ping{1, "n1"};
  membership::Transport::Reply reply;
  auto send = [&](absl::string_view peer) {
    absl::Notification done;
    absl::Status result;
    int calls = 0;
    transport.Send(peer, n1.address(), membership::EncodeMessage(m),
                   absl::Seconds(2),
                   [&](absl::Status s, membership::Transport::Reply r) {
                     ++calls;
                     result = s;
                     reply = std::move(r);
                     done.Notify();
                   });
    REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    CHECK(calls == 1);
    return result;
  };
  // The ack to a ping comes back in the response, from the node the
  // server's certificate names (for a seed known only by address too), so
  // that it needs no connection back to n2, which n1 does not even know.
  auto acked = [&] {
    if (reply.from != "n1") return false;
    absl::StatusOr<membership::Message> a =
        membership::DecodeMessage(reply.bytes, 64 << 10);
    if (!a.ok() || a->from != "n1") return false;
    const membership::Ack* ack = std::get_if<membership::Ack>(&a->body);
    return ack != nullptr && ack->seq == 1;
  };
  // n1 holds the address, so a channel meant for n3 fails its handshake
  // (the call waits for a connection that never becomes ready).
  absl::Status wrong = send("n3");
  CHECK((wrong.code() == absl::StatusCode::kUnavailable ||
         wrong.code() == absl::StatusCode::kDeadlineExceeded));
  CHECK(Must(n1.membership().Stats()).messages_received == 0);
  // Meant for n1 (or any node, as for a seed) it is delivered.
  CHECK(send("n1").ok());
  CHECK(acked());
  CHECK(send("").ok());
  CHECK(acked());
  CHECK(Must(n1.membership().Stats()).replies_in_response == 2);
  CHECK(transport.in_flight() == 0);
}

// Counts the frames it is sent, as node `name` of the Pki.
class CountingServer {
 public:
  class Service final : public mycel::v1::Gossip::CallbackService {
   public:
    grpc::ServerUnaryReactor* Exchange(
        grpc::CallbackServerContext* ctx, const mycel::v1::GossipFrame*,
        mycel::v1::GossipFrameAck* resp) override {
      frames.fetch_add(1);
      {
        absl::MutexLock lock(&mu);
        resp->set_reply(reply);
      }
      grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    std::atomic<int> frames{0};
    absl::Mutex mu;
    std::string reply ABSL_GUARDED_BY(mu);  // sent in every response
  };

  CountingServer(const Pki& pki, const std::string& name, int port) {
    TlsFiles files;
    files.cert_file = pki.cert_file(name);
    files.key_file = pki.key_file(name);
    files.ca_file = pki.ca_file();
    files.cert = Must(ReadFile(files.cert_file));
    files.key = Must(ReadFile(files.key_file));
    files.ca = Must(ReadFile(files.ca_file));
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                             MtlsServerCredentials(files, absl::Minutes(1)),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    REQUIRE(port_ > 0);
  }
  ~CountingServer() { Stop(); }
  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_ = nullptr;
  }
  int port() const { return port_; }
  int frames() const { return service_.frames.load(); }
  // What every response carries as the direct answer from now on.
  void set_reply(std::string bytes) {
    absl::MutexLock lock(&service_.mu);
    service_.reply = std::move(bytes);
  }

 private:
  Service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_CASE("an answer in a response forged in another node's name is refused") {
  // A member (n1, with its own valid certificate) answers n2's join with a
  // push-pull answer that claims to come from n3, listing n3 alive: the
  // answer counts as n1's (its certificate), so the state machine refuses
  // it, and n2 learns of no n3.
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2", "n3"}) pki.Issue(n);
  CountingServer n1(pki, "n1", 0);
  membership::Message forged;
  forged.from = "n3";
  forged.body = membership::PushPull{1, false, true, {}};
  n1.set_reply(membership::EncodeMessage(forged));
  Loop loop;
  Node n2(pki, "n2", &loop);
  REQUIRE(n2.Start({absl::StrCat("127.0.0.1:", n1.port())}).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline &&
         Must(n2.membership().Stats()).membership.rejected_sender_mismatch ==
             0) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const membership::DriverStats s = Must(n2.membership().Stats());
  CHECK(n1.frames() >= 1);
  CHECK(s.membership.rejected_sender_mismatch >= 1);
  for (const membership::MemberInfo& m : Must(n2.membership().Members())) {
    CHECK(m.name != "n3");
  }
}

TEST_CASE("GrpcTransport: a peer restarted at its address gets the next send") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2"}) pki.Issue(n);
  identity::PeerChannels channels({.mesh = "prod",
                                   .ca_file = pki.ca_file(),
                                   .cert_file = pki.cert_file("n2"),
                                   .key_file = pki.key_file("n2")});
  membership::GrpcTransport transport(
      {.channels = [&](absl::string_view name, absl::string_view address) {
        return channels.Get(name, address);
      }});
  auto send = [&](const std::string& address) {
    absl::Notification done;
    absl::Status result;
    transport.Send("n1", address, "x", absl::Milliseconds(500),
                   [&](absl::Status s, membership::Transport::Reply) {
                     result = s;
                     done.Notify();
                   });
    REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return result;
  };
  auto first = std::make_unique<CountingServer>(pki, "n1", 0);
  const int port = first->port();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  REQUIRE(send(address).ok());
  first.reset();
  // Down: sends fail, and gRPC puts the channel in reconnect backoff.
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(send(address).ok());
    absl::SleepFor(absl::Milliseconds(400));
  }
  // Back at the same address: the very next send (a join's answer is often
  // the only one for a while) is delivered, not failed for the backoff.
  CountingServer second(pki, "n1", port);
  absl::Status s = send(address);
  CHECK_MESSAGE(s.ok(), s.ToString());
  CHECK(second.frames() == 1);
}

TEST_CASE("GrpcTransport: an unreachable address fails within the deadline") {
  testing::TempDir dir;
  Pki pki(dir.path());
  pki.Issue("n2");
  identity::PeerChannels channels({.mesh = "prod",
                                   .ca_file = pki.ca_file(),
                                   .cert_file = pki.cert_file("n2"),
                                   .key_file = pki.key_file("n2")});
  membership::GrpcTransport transport(
      {.channels = [&](absl::string_view name, absl::string_view address) {
        return channels.Get(name, address);
      }});
  absl::Notification done;
  absl::Status result;
  const absl::Time start = absl::Now();
  // TEST-NET-1 (RFC 5737): nothing answers there.
  transport.Send("n1", "192.0.2.1:7946", "x", absl::Milliseconds(500),
                 [&](absl::Status s, membership::Transport::Reply) {
                   result = s;
                   done.Notify();
                 });
  // Send returned at once; the answer comes later.
  CHECK(absl::Now() - start < absl::Milliseconds(100));
  REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  CHECK_FALSE(result.ok());
  CHECK(absl::Now() - start < absl::Seconds(2));
}

}  // namespace
}  // namespace mycel
