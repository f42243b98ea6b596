// Membership over the real wire, in one process: NodeMembership (the
// driver, the node-key signer, the mesh-CA verifier, GrpcTransport over
// PeerChannels) behind a real gRPC server with the daemon's mutual-TLS
// credentials, Authorizer and GossipService, on 127.0.0.1. Nodes join
// through a seed and see each other alive; a frame whose `from` is not the
// sender's certificate is refused; a user or an unauthenticated client
// cannot gossip; a channel to an address that another node holds is
// refused during the handshake.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <openssl/conf.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/server/credentials.h"
#include "daemon/server/gossip_service.h"
#include "mesh/identity/access_rules.h"
#include "mesh/identity/authorizer.h"
#include "mesh/identity/peer_channels.h"
#include "mesh/identity/tls_defaults.h"
#include "mesh/identity/trust.h"
#include "mesh/membership/codec.h"
#include "mesh/membership/grpc_transport.h"
#include "mesh/membership/node_membership.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/private_key.h"
#include "mycel/v1/gossip.grpc.pb.h"
#include "runtime/asio_clock.h"
#include "runtime/fs.h"
#include "tests/testing/io_loop.h"
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

// A Gossip.Link opened with a raw stub and held open by the test.
struct HeldLink {
  grpc::ClientContext ctx;
  std::unique_ptr<
      grpc::ClientReaderWriter<mycel::v1::GossipFrame, mycel::v1::GossipFrame>>
      stream;
};

// Node `name`'s certificate, key and the mesh CA, as a server loads them.
TlsFiles NodeTlsFiles(const Pki& pki, const std::string& name) {
  TlsFiles files;
  files.cert_file = pki.cert_file(name);
  files.key_file = pki.key_file(name);
  files.ca_file = pki.ca_file();
  files.cert = Must(ReadFile(files.cert_file));
  files.key = Must(ReadFile(files.key_file));
  files.ca = Must(ReadFile(files.ca_file));
  return files;
}

// An io_context run by two threads.
using Loop = testing::IoLoop;

// One node: trust, a TLS gRPC server with the Gossip service, membership.
class Node {
 public:
  Node(const Pki& pki, std::string name, Loop* loop)
      : name_(std::move(name)), pki_(pki), loop_(loop) {
    REQUIRE(trust_.SetCa(pki.ca_pem()).ok());
    authz_ = std::make_shared<identity::Authorizer>(
        identity::Authorizer::Endpoint::kTcp, &trust_,
        &identity::AccessRules::Builtin(), &loop->clock);
    const TlsFiles files = NodeTlsFiles(pki, name_);
    std::shared_ptr<grpc::ServerCredentials> creds =
        MtlsServerCredentials(files, absl::Minutes(1));
    creds->SetAuthMetadataProcessor(authz_);
    service_ = std::make_unique<GossipService>(authz_.get(), &membership_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", creds, &port_);
    builder.RegisterService(service_.get());
    // As myceld's servers (daemon/server/api_server.cc): no bandwidth-delay
    // probe PINGs, which the tests that count bytes would see.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
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
  identity::Trust& trust() { return trust_; }
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

// A GrpcTransport as node `who` of the Pki, with its own PeerChannels, that
// keeps what arrives on its links.
class TransportAs {
 public:
  TransportAs(const Pki& pki, const std::string& who, Loop* loop,
              size_t max_links = 256,
              absl::Duration stuck_timeout = absl::Seconds(10),
              const identity::Trust* trust = nullptr)
      : channels_({.mesh = "prod",
                   .ca_file = pki.ca_file(),
                   .cert_file = pki.cert_file(who),
                   .key_file = pki.key_file(who)}),
        transport_(
            {.channels =
                 [this](absl::string_view name, absl::string_view address) {
                   return channels_.Get(name, address);
                 },
             .inbound =
                 [this](std::string peer, std::string bytes,
                        std::function<void(std::string)> reply) {
                   absl::MutexLock lock(&mu_);
                   arrived_.push_back({std::move(peer), std::move(bytes)});
                   reply("");
                 },
             .clock = &loop->clock,
             .trust = trust,
             .max_links = max_links,
             .stuck_timeout = stuck_timeout}) {}

  membership::GrpcTransport& transport() { return transport_; }

  // Sends `bytes` and waits for the outcome. `awaits_answer`, as for a
  // ping: the test may wait for its ack.
  absl::Status Send(absl::string_view peer, const std::string& address,
                    std::string bytes,
                    absl::Duration deadline = absl::Seconds(2),
                    bool awaits_answer = true) {
    absl::Notification done;
    absl::Status result;
    int calls = 0;
    transport_.Send(peer, address, std::move(bytes), deadline, awaits_answer,
                    [&](absl::Status s, membership::Transport::Reply) {
                      ++calls;
                      result = s;
                      done.Notify();
                    });
    REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    CHECK(calls == 1);
    return result;
  }

  // Messages that arrived on links: (peer, bytes).
  std::vector<std::pair<std::string, std::string>> arrived() {
    absl::MutexLock lock(&mu_);
    return arrived_;
  }

 private:
  identity::PeerChannels channels_;
  absl::Mutex mu_;
  std::vector<std::pair<std::string, std::string>> arrived_
      ABSL_GUARDED_BY(mu_);
  membership::GrpcTransport transport_;
};

// A ping from the node `from` to `target`.
membership::Message PingFrom(std::string from, uint64_t seq,
                             std::string target) {
  membership::Message m;
  m.from = std::move(from);
  m.body = membership::Ping{seq, std::move(target)};
  return m;
}

// Whether an ack to `seq` has arrived at `t`, waiting up to `timeout`.
bool AckArrives(TransportAs& t, uint64_t seq,
                absl::Duration timeout = absl::Seconds(5)) {
  return WaitFor(
             [&] {
               for (const auto& [from, bytes] : t.arrived()) {
                 absl::StatusOr<membership::Message> a =
                     membership::DecodeMessage(bytes, 64 << 10);
                 const membership::Ack* ack =
                     a.ok() ? std::get_if<membership::Ack>(&a->body) : nullptr;
                 if (ack != nullptr && ack->seq == seq) return true;
               }
               return false;
             },
             timeout)
      .has_value();
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

// Opens a Link, writes `message`, half-closes, and returns how the server
// ended the stream.
grpc::Status OverLink(mycel::v1::Gossip::Stub& stub, std::string bytes) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto stream = stub.Link(&ctx);
  mycel::v1::GossipFrame frame;
  frame.set_message(std::move(bytes));
  stream->Write(frame);
  stream->WritesDone();
  mycel::v1::GossipFrame in;
  while (stream->Read(&in)) {
  }
  return stream->Finish();
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

// Node n1, serving and running membership, in a mesh whose CA has issued
// n1, n2 and n3.
struct Served {
  Served() { REQUIRE(n1.Start({}).ok()); }

  testing::TempDir dir;
  Pki pki{dir.path()};
  const bool issued = [this] {
    for (const char* n : {"n1", "n2", "n3"}) pki.Issue(n);
    return true;
  }();
  Loop loop;
  Node n1{pki, "n1", &loop};
};

TEST_CASE_FIXTURE(
    Served, "a frame whose sender is not the certificate's node is refused") {
  auto as_n2 = StubAs(pki, "n2", n1.address());

  // n2 (its certificate) says it is n3 and pings n1.
  membership::Message forged = PingFrom("n3", 1, "n1");
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

  // Over a link the same: the sender is the certificate's node.
  CHECK(OverLink(*as_n2, membership::EncodeMessage(forged)).ok());
  REQUIRE(WaitFor(
      [&] {
        return Must(n1.membership().Stats())
                   .membership.rejected_sender_mismatch == 2;
      },
      absl::Seconds(5)));
  for (const auto& m : Must(n1.membership().Members())) CHECK(m.name == "n1");
}

TEST_CASE("users and clients without a certificate cannot gossip") {
  testing::TempDir dir;
  Pki pki(dir.path());
  pki.Issue("n1");
  pki.Issue("alice", pki::IdentityKind::kUser);
  Loop loop;
  Node n1(pki, "n1", &loop);
  REQUIRE(n1.Start({}).ok());
  membership::Message m = PingFrom("alice", 1, "n1");

  auto as_user = StubAs(pki, "alice", n1.address());
  grpc::Status s = Exchange(*as_user, m);
  CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(s.error_message().find("a node of the mesh") != std::string::npos);

  auto anonymous = StubAs(pki, "", n1.address());
  s = Exchange(*anonymous, m);
  CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(n1.denied() == 2);
  // Nor open a link.
  s = OverLink(*as_user, membership::EncodeMessage(m));
  CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  s = OverLink(*anonymous, membership::EncodeMessage(m));
  CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(n1.denied() == 4);
  CHECK(Must(n1.membership().Stats()).messages_received == 0);
}

TEST_CASE("gossip before membership runs is FAILED_PRECONDITION") {
  testing::TempDir dir;
  Pki pki(dir.path());
  pki.Issue("n1");
  pki.Issue("n2");
  Loop loop;
  Node n1(pki, "n1", &loop);
  membership::Message m = PingFrom("n2", 1, "n1");
  grpc::Status s = Exchange(*StubAs(pki, "n2", n1.address()), m);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(s.error_message().find("membership is not running") !=
        std::string::npos);
  s = OverLink(*StubAs(pki, "n2", n1.address()), membership::EncodeMessage(m));
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
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
  TransportAs n2(pki, "n2", &loop);
  membership::Message m = PingFrom("n2", 1, "n1");
  // The ack to a ping comes back on the link, from the node the server's
  // certificate names (for a seed known only by address too), so that it
  // needs no connection back to n2, which n1 does not even know.
  auto acks = [&] {
    int n = 0;
    for (const auto& [from, bytes] : n2.arrived()) {
      absl::StatusOr<membership::Message> a =
          membership::DecodeMessage(bytes, 64 << 10);
      // The ack leaves its sender out: the link authenticated it.
      if (from != "n1" || !a.ok() || !a->from.empty()) continue;
      const membership::Ack* ack = std::get_if<membership::Ack>(&a->body);
      n += ack != nullptr && ack->seq == 1;
    }
    return n;
  };
  // n1 holds the address, so a link meant for n3 fails its handshake
  // (the frame waits for a connection that never becomes ready).
  absl::Status wrong =
      n2.Send("n3", n1.address(), membership::EncodeMessage(m));
  CHECK(wrong.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(Must(n1.membership().Stats()).messages_received == 0);
  // Meant for n1 (or any node, as for a seed) it is delivered.
  CHECK(n2.Send("n1", n1.address(), membership::EncodeMessage(m)).ok());
  CHECK(WaitFor([&] { return acks() == 1; }, absl::Seconds(5)));
  CHECK(n2.Send("", n1.address(), membership::EncodeMessage(m)).ok());
  CHECK(WaitFor([&] { return acks() == 2; }, absl::Seconds(5)));
  CHECK(Must(n1.membership().Stats()).replies_in_response == 2);
  const membership::GrpcTransport::Stats st = n2.transport().stats();
  CHECK(st.frames_written == 2);
  CHECK(st.frames_received == 2);
  CHECK(st.unary_sends == 0);
}

// Counts the frames it is sent, as node `name` of the Pki.
class CountingServer {
 public:
  class Service : public mycel::v1::Gossip::CallbackService {
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
  // Also serves links: each frame counted and answered with `reply`.
  class LinkService final : public Service {
   public:
    grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>*
    Link(grpc::CallbackServerContext*) override {
      return new Reactor(this);
    }

   private:
    class Reactor final
        : public grpc::ServerBidiReactor<mycel::v1::GossipFrame,
                                         mycel::v1::GossipFrame> {
     public:
      explicit Reactor(LinkService* service) : service_(service) {
        StartSendInitialMetadata();
        StartRead(&in_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        service_->frames.fetch_add(1);
        {
          absl::MutexLock lock(&service_->mu);
          out_.set_message(service_->reply);
        }
        if (out_.message().empty()) {
          StartRead(&in_);
        } else {
          StartWrite(&out_);
        }
      }
      void OnWriteDone(bool) override { StartRead(&in_); }
      void OnDone() override { delete this; }

     private:
      LinkService* const service_;
      mycel::v1::GossipFrame in_;
      mycel::v1::GossipFrame out_;
    };
  };

  // Without `links`, the server has no Link method, as an older myceld.
  CountingServer(const Pki& pki, const std::string& name, int port,
                 bool links = true)
      : service_(links ? std::make_unique<LinkService>()
                       : std::make_unique<Service>()) {
    const TlsFiles files = NodeTlsFiles(pki, name);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                             MtlsServerCredentials(files, absl::Minutes(1)),
                             &port_);
    builder.RegisterService(service_.get());
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
  int frames() const { return service_->frames.load(); }
  // What every response carries as the direct answer from now on.
  void set_reply(std::string bytes) {
    absl::MutexLock lock(&service_->mu);
    service_->reply = std::move(bytes);
  }

 private:
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Node `name` of the Pki serving links through its own GrpcTransport,
// whose inbound keeps every frame's answer back until Answer(): a link
// then sits between a frame and its answer, with no read outstanding.
class HoldingServer {
 public:
  HoldingServer(const Pki& pki, const std::string& name, Loop* loop)
      : transport_({.inbound =
                        [this](std::string, std::string,
                               std::function<void(std::string)> reply) {
                          absl::MutexLock lock(&mu_);
                          held_.push_back(std::move(reply));
                        },
                    .clock = &loop->clock}),
        service_(&transport_) {
    const TlsFiles files = NodeTlsFiles(pki, name);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(
        "127.0.0.1:0", MtlsServerCredentials(files, absl::Minutes(1)), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
  }
  ~HoldingServer() {
    Answer();
    transport_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  size_t held() {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  // Answers every held frame with `answer` (by default, lets them go
  // unanswered), which resumes its link's reads.
  void Answer(const std::string& answer = "") {
    std::vector<std::function<void(std::string)>> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
    }
    for (auto& reply : held) reply(answer);
  }
  membership::GrpcTransport& transport() { return transport_; }

 private:
  // Every caller is taken as n2, the only one these tests use.
  class Service final : public mycel::v1::Gossip::CallbackService {
   public:
    explicit Service(membership::GrpcTransport* t) : t_(t) {}
    grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>*
    Link(grpc::CallbackServerContext* ctx) override {
      return t_->Accept(ctx, "n2", 0);
    }

   private:
    membership::GrpcTransport* const t_;
  };

  absl::Mutex mu_;
  std::vector<std::function<void(std::string)>> held_ ABSL_GUARDED_BY(mu_);
  membership::GrpcTransport transport_;
  Service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_CASE("a link closed while a frame waits for its answer still ends") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2"}) pki.Issue(n);
  Loop loop;
  HoldingServer n1(pki, "n1", &loop);
  auto as_n2 = StubAs(pki, "n2", n1.address());
  mycel::v1::GossipFrame frame;
  frame.set_message(membership::EncodeMessage(PingFrom("", 1, "")));
  std::vector<std::unique_ptr<HeldLink>> links;
  // Three links from n2, a frame down each, none answered: n1 evicts the
  // first (at most two per peer) while it reads nothing, waiting for the
  // answer.
  for (size_t i = 1; i <= 3; ++i) {
    auto h = std::make_unique<HeldLink>();
    h->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
    h->stream = as_n2->Link(&h->ctx);
    REQUIRE(h->stream->Write(frame));
    links.push_back(std::move(h));
    REQUIRE(WaitFor([&] { return n1.held() == i; }, absl::Seconds(5)));
  }
  // The evicted link ends at once with RESOURCE_EXHAUSTED, not at its
  // deadline, and leaves n1's table.
  const absl::Time start = absl::Now();
  mycel::v1::GossipFrame in;
  while (links[0]->stream->Read(&in)) {
  }
  const grpc::Status st = links[0]->stream->Finish();
  CHECK_MESSAGE(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED,
                st.error_message());
  CHECK(absl::Now() - start < absl::Seconds(5));
  CHECK(WaitFor([&] { return n1.transport().stats().links_open == 2; },
                absl::Seconds(5)));
  CHECK(n1.transport().stats().links_evicted == 1);
  // Answered, the other two read on.
  n1.Answer();
  for (size_t i = 1; i < links.size(); ++i) {
    REQUIRE(links[i]->stream->Write(frame));
  }
  CHECK(WaitFor([&] { return n1.held() == 2; }, absl::Seconds(5)));
  for (size_t i = 1; i < links.size(); ++i) links[i]->ctx.TryCancel();
}

TEST_CASE("GrpcTransport: a late answer does not hold back the next one") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2"}) pki.Issue(n);
  Loop loop;
  HoldingServer n1(pki, "n1", &loop);
  TransportAs n2(pki, "n2", &loop);
  auto arrived = [&](const std::string& bytes) {
    for (const auto& [from, b] : n2.arrived()) {
      if (b == bytes) return true;
    }
    return false;
  };
  // n1 answers the frame it holds with `answer`, and takes the next.
  auto answer = [&](const std::string& a) {
    REQUIRE(WaitFor([&] { return n1.held() == 1; }, absl::Seconds(5)));
    n1.Answer(a);
  };
  REQUIRE(n2.Send("n1", n1.address(), "p0").ok());
  answer("a0");
  REQUIRE(WaitFor([&] { return arrived("a0"); }, absl::Seconds(5)));
  REQUIRE(WaitFor([&] { return n2.transport().stats().links_paired == 1; },
                  absl::Seconds(5)));
  // Answered, with nothing else awaited, n2 stops reading the stream its
  // answers come on.
  REQUIRE(n2.Send("n1", n1.address(), "p1").ok());
  answer("a1");
  REQUIRE(WaitFor([&] { return arrived("a1"); }, absl::Seconds(5)));
  // Two frames whose answers come after their deadlines: the first answer
  // is read (its read was started), the second waits unread.
  REQUIRE(n2.Send("n1", n1.address(), "p2", absl::Milliseconds(300)).ok());
  REQUIRE(n2.Send("n1", n1.address(), "p3", absl::Milliseconds(300)).ok());
  absl::SleepFor(absl::Milliseconds(600));
  answer("a2");
  REQUIRE(WaitFor([&] { return arrived("a2"); }, absl::Seconds(5)));
  answer("a3");
  absl::SleepFor(absl::Milliseconds(300));
  CHECK_FALSE(arrived("a3"));
  // The next frame that awaits an answer reads the late one first, and
  // reads on for its own: matched by answer_to, not counted.
  REQUIRE(n2.Send("n1", n1.address(), "p4").ok());
  CHECK(WaitFor([&] { return arrived("a3"); }, absl::Seconds(5)));
  answer("a4");
  CHECK(WaitFor([&] { return arrived("a4"); }, absl::Seconds(2)));
  const membership::GrpcTransport::Stats st = n2.transport().stats();
  CHECK(st.links_open == 1);
  CHECK(st.links_dialed == 1);
  CHECK(st.links_stuck == 0);
}

TEST_CASE_FIXTURE(Served, "a second stream for no open link is refused") {
  // n2 names a link n1 does not have: nothing to pair with.
  auto stub = StubAs(pki, "n2", n1.address());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.AddMetadata("mycel-link-for", "abc123");
  auto stream = stub->Link(&ctx);
  mycel::v1::GossipFrame in;
  while (stream->Read(&in)) {
  }
  const grpc::Status st = stream->Finish();
  CHECK_MESSAGE(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION,
                st.error_message());
  CHECK_MESSAGE(absl::StrContains(st.error_message(), "no open link abc123"),
                st.error_message());
  CHECK(Must(n1.membership().TransportStats()).links_open == 0);
}

TEST_CASE_FIXTURE(Served,
                  "a second stream pairs only with its caller's link, once") {
  // Opens a Link as `who` with `key: value` in its metadata; Refused()
  // reads it to its end.
  struct Stream {
    Stream(Served& s, const std::string& who, const std::string& key,
           const std::string& value)
        : stub(StubAs(s.pki, who, s.n1.address())) {
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
      ctx.AddMetadata(key, value);
      stream = stub->Link(&ctx);
    }
    grpc::Status Refused() {
      mycel::v1::GossipFrame in;
      while (stream->Read(&in)) {
      }
      return stream->Finish();
    }
    std::unique_ptr<mycel::v1::Gossip::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<mycel::v1::GossipFrame,
                                             mycel::v1::GossipFrame>>
        stream;
  };
  Stream first(*this, "n2", "mycel-link-id", "77");
  first.stream->WaitForInitialMetadata();
  // n1 says it pairs.
  CHECK(first.ctx.GetServerInitialMetadata().count("mycel-link-pairs") == 1);
  // Another node cannot pair with n2's link, whatever id it names.
  Stream other(*this, "n3", "mycel-link-for", "77");
  grpc::Status st = other.Refused();
  CHECK_MESSAGE(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION,
                st.error_message());
  // n2 can, once.
  Stream second(*this, "n2", "mycel-link-for", "77");
  second.stream->WaitForInitialMetadata();
  REQUIRE(WaitFor(
      [&] { return Must(n1.membership().TransportStats()).links_paired == 1; },
      absl::Seconds(5)));
  Stream third(*this, "n2", "mycel-link-for", "77");
  st = third.Refused();
  CHECK_MESSAGE(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION,
                st.error_message());
  membership::GrpcTransport::Stats t = Must(n1.membership().TransportStats());
  CHECK(t.links_open == 1);
  CHECK(t.links_accepted == 1);
  CHECK(t.links_paired == 1);
  // Ending the first stream ends the pair at n1.
  first.ctx.TryCancel();
  CHECK(WaitFor([&] { return Must(n1.membership().DescribeLinks()).empty(); },
                absl::Seconds(5)));
  CHECK(Must(n1.membership().TransportStats()).links_open == 0);
  second.ctx.TryCancel();
}

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
  Loop loop;
  TransportAs n2(pki, "n2", &loop);
  auto first = std::make_unique<CountingServer>(pki, "n1", 0);
  const int port = first->port();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  REQUIRE(n2.Send("n1", address, "x", absl::Milliseconds(500)).ok());
  first.reset();
  // The link ends with the server (a frame written into it meanwhile would
  // count as sent: a write is done once the connection took it).
  REQUIRE(WaitFor([&] { return n2.transport().stats().links_open == 0; },
                  absl::Seconds(5)));
  // Down: sends fail, and gRPC puts the channel in reconnect backoff.
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(n2.Send("n1", address, "x", absl::Milliseconds(500)).ok());
    absl::SleepFor(absl::Milliseconds(400));
  }
  // Back at the same address: the very next send (a join's answer is often
  // the only one for a while) is delivered, not failed for the backoff;
  // the frames that expired meanwhile are not delivered late.
  CountingServer second(pki, "n1", port);
  absl::Status s = n2.Send("n1", address, "x", absl::Milliseconds(2000));
  CHECK_MESSAGE(s.ok(), s.ToString());
  absl::SleepFor(absl::Milliseconds(300));
  CHECK(second.frames() == 1);
  CHECK(n2.transport().stats().frames_expired == 3);
}

// A TCP listener on 127.0.0.1 that never accepts: the kernel completes the
// connection, and nothing ever answers the TLS handshake.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { close(fd_); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_CASE("GrpcTransport: a peer that accepts and never answers") {
  testing::TempDir dir;
  Pki pki(dir.path());
  pki.Issue("n2");
  Loop loop;
  TransportAs n2(pki, "n2", &loop, 256, absl::Seconds(1));
  SilentListener silent;
  const absl::Time start = absl::Now();
  absl::Status s =
      n2.Send("n1", silent.address(), "x", absl::Milliseconds(500));
  // The frame fails at its deadline, not at a TCP or TLS timeout.
  CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::Now() - start < absl::Seconds(2));
  // The link that never came up is closed, so the next send dials afresh.
  REQUIRE(WaitFor([&] { return n2.transport().stats().links_open == 0; },
                  absl::Seconds(5)));
  CHECK(n2.transport().stats().links_stuck == 1);
  CHECK(n2.Send("n1", silent.address(), "y", absl::Milliseconds(200)).code() ==
        absl::StatusCode::kDeadlineExceeded);
  CHECK(n2.transport().stats().links_dialed == 2);
}

// A TCP relay on 127.0.0.1 to `upstream`, for one connection, that counts
// the bytes and the TLS records each way: down (what the upstream, the
// server, sends back) and up.
class CountingRelay {
 public:
  explicit CountingRelay(int upstream_port) : upstream_port_(upstream_port) {
    listen_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_ >= 0);
    sockaddr_in a = Loopback(0);
    REQUIRE(bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(listen(listen_, 1) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~CountingRelay() {
    stop_ = true;
    thread_.join();
    close(listen_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int64_t down() const { return down_.load(); }
  int64_t up() const { return up_.load(); }
  int64_t records_down() const { return records_[1].load(); }
  int64_t records_up() const { return records_[0].load(); }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    return a;
  }

  void Run() {
    pollfd lp{listen_, POLLIN, 0};
    while (!stop_ && poll(&lp, 1, 50) == 0) {
    }
    if (stop_) return;
    const int client = accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(upstream_port_);
    if (client < 0 || server < 0 ||
        connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      stop_ = true;
    }
    char buf[16384];
    while (!stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (poll(fds, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          stop_ = true;
          break;
        }
        const int to = i == 0 ? server : client;
        if (write(to, buf, static_cast<size_t>(n)) != n) stop_ = true;
        (i == 1 ? down_ : up_) += n;
        CountRecords(i, buf, static_cast<size_t>(n));
      }
    }
    if (client >= 0) close(client);
    if (server >= 0) close(server);
  }

  const int upstream_port_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> down_{0};
  std::atomic<int64_t> up_{0};
  // TLS records (a 5-byte header: type, version, length) each way, and
  // where the reading of each way stands: header bytes seen, body left.
  std::atomic<int64_t> records_[2] = {0, 0};
  struct Parse {
    uint8_t header[5] = {};
    size_t have = 0;
    size_t body_left = 0;
  } parse_[2];

  void CountRecords(int way, const char* data, size_t n) {
    Parse& p = parse_[way];
    for (size_t i = 0; i < n;) {
      if (p.body_left > 0) {
        const size_t skip = std::min(p.body_left, n - i);
        p.body_left -= skip;
        i += skip;
        continue;
      }
      p.header[p.have++] = static_cast<uint8_t>(data[i++]);
      if (p.have == 5) {
        p.body_left = (size_t{p.header[3]} << 8) | p.header[4];
        p.have = 0;
        records_[way].fetch_add(1);
      }
    }
  }
  std::thread thread_;
};

// Node n1, and n2 reaching it through a CountingRelay, which counts what
// n1 sends.
struct Relayed : Served {
  // n2 pings n1; n1's ack arrives.
  void Ping(uint64_t seq) {
    REQUIRE(n2.Send("n1", relay.address(),
                    membership::EncodeMessage(PingFrom("", seq, "")))
                .ok());
    REQUIRE(AckArrives(n2, seq));
  }
  static int PortOf(const std::string& address) {
    return std::stoi(address.substr(address.rfind(':') + 1));
  }

  CountingRelay relay{PortOf(n1.address())};
  TransportAs n2{pki, "n2", &loop};
};

TEST_CASE("GrpcTransport: an answer carries the link's window updates") {
  Relayed r;
  CountingRelay& relay = r.relay;
  auto ping = [&](uint64_t seq) { r.Ping(seq); };
  // The link comes up (TLS handshake, HTTP/2 settings) with the first
  // ping, and n1's first acks carry its own record to the new peer.
  uint64_t seq = 1;
  for (; seq <= 20; ++seq) ping(seq);
  const int64_t before = relay.down();
  constexpr int kPings = 40;
  for (int i = 0; i < kPings; ++i) ping(seq++);
  // An ack of 4 bytes is one TLS record: 22 bytes of TLS, 9 of HTTP/2
  // DATA, 5 of gRPC prefix, 6 of frame, and the stream's and the
  // connection's WINDOW_UPDATE for the ping it answers (13 bytes each):
  // 68 bytes. Sent on their own, as gRPC 1.51 does once a read waits on a
  // stream that took in data, the updates would take a record of 48
  // bytes and the ack one of 42: 90 bytes a ping.
  const double per_ping =
      static_cast<double>(relay.down() - before) / static_cast<double>(kPings);
  MESSAGE("n1 sent ", per_ping, " bytes per ping answered");
  CHECK(per_ping < 80);
  CHECK(per_ping > 55);
}

TEST_CASE("GrpcTransport: a prober's window updates ride on its next ping") {
  Relayed r;
  CountingRelay& relay = r.relay;
  uint64_t seq = 1;
  for (; seq <= 20; ++seq) r.Ping(seq);
  // n1 paired the link's streams: n2 reads the one its acks come on only
  // while it awaits one.
  CHECK(r.n2.transport().stats().links_paired == 1);
  CHECK(r.n2.transport().stats().links_open == 1);
  const int64_t up = relay.up(), records = relay.records_up();
  const int64_t records_down = relay.records_down();
  constexpr int kPings = 40;
  for (int i = 0; i < kPings; ++i) r.Ping(seq++);
  const double per_ping =
      static_cast<double>(relay.up() - up) / static_cast<double>(kPings);
  const double records_per_ping =
      static_cast<double>(relay.records_up() - records) / kPings;
  MESSAGE("n2 sent ", per_ping, " bytes and ", records_per_ping,
          " TLS records per ping; n1 ",
          static_cast<double>(relay.records_down() - records_down) / kPings,
          " records per ack");
  // A ping of this test (42 bytes alone: its seq takes one byte) is one
  // TLS record with the updates for the ack before it (13 bytes each, the
  // stream's and the connection's): 68 bytes. On a stream read at all
  // times, the updates went alone after every ack: two records, 90 bytes.
  CHECK(records_per_ping < 1.25);
  CHECK(per_ping < 85);
  CHECK(relay.records_down() - records_down < kPings * 5 / 4);
}

TEST_CASE("a new link costs the server no TLS session tickets") {
  // myceld's TLS servers turn the tickets off (MtlsServerCredentials),
  // unless the host's OpenSSL configuration has a TLS policy of its own.
  char* conf = CONF_get1_default_config_file();
  absl::StatusOr<bool> policy = identity::ConfiguresSsl(conf);
  OPENSSL_free(conf);
  REQUIRE_MESSAGE(policy.ok(), policy.status());
  if (*policy) {
    MESSAGE("skipped: this host's OpenSSL has a TLS policy of its own");
    return;
  }
  Relayed r;
  r.Ping(1);
  absl::SleepFor(absl::Milliseconds(300));  // anything sent after the ack
  const int64_t sent = r.relay.down();
  // The handshake (certificate and all), HTTP/2's settings, the headers,
  // the ack and n1's own record: about 2,400 bytes. With the two session
  // tickets a TLS 1.3 server sends by default, about 3,950.
  MESSAGE("n1 sent ", sent, " bytes to open the link and ack");
  CHECK(sent < 3000);
  CHECK(sent > 1500);
}

TEST_CASE("GrpcTransport: a server without links gets unary calls") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2"}) pki.Issue(n);
  Loop loop;
  CountingServer old(pki, "n1", 0, /*links=*/false);
  TransportAs n2(pki, "n2", &loop);
  const std::string address = absl::StrCat("127.0.0.1:", old.port());
  // The first frame goes with the link the server does not know.
  CHECK(n2.Send("n1", address, "x").code() == absl::StatusCode::kUnimplemented);
  CHECK(n2.Send("n1", address, "y").ok());
  CHECK(n2.Send("n1", address, "z").ok());
  CHECK(old.frames() == 2);
  CHECK(n2.transport().stats().unary_sends == 2);
  CHECK(n2.transport().in_flight() == 0);
}

TEST_CASE("GrpcTransport: beyond max_links the least recently used closes") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2", "n3"}) pki.Issue(n);
  Loop loop;
  CountingServer n1(pki, "n1", 0), n3(pki, "n3", 0);
  TransportAs n2(pki, "n2", &loop, /*max_links=*/1);
  const std::string a1 = absl::StrCat("127.0.0.1:", n1.port());
  const std::string a3 = absl::StrCat("127.0.0.1:", n3.port());
  CHECK(n2.Send("n1", a1, "x").ok());
  CHECK(n2.Send("n3", a3, "x").ok());
  CHECK(n2.Send("n1", a1, "x").ok());
  CHECK(WaitFor([&] { return n1.frames() == 2 && n3.frames() == 1; },
                absl::Seconds(5)));
  // An evicted link is closed gracefully: what was written arrives (the
  // frames above), and it is gone once the server has finished it.
  CHECK(WaitFor([&] { return n2.transport().stats().links_open == 1; },
                absl::Seconds(5)));
  const membership::GrpcTransport::Stats st = n2.transport().stats();
  CHECK(st.links_dialed == 3);
  CHECK(st.links_evicted == 2);
}

TEST_CASE_FIXTURE(Served,
                  "a link is closed once its peer is revoked, at either end") {
  TransportAs n2(pki, "n2", &loop);
  membership::Message m = PingFrom("n2", 1, "n1");
  REQUIRE(n2.Send("n1", n1.address(), membership::EncodeMessage(m)).ok());
  REQUIRE(WaitFor([&] { return n2.arrived().size() == 1; }, absl::Seconds(5)));
  const uint64_t received = Must(n1.membership().Stats()).messages_received;

  // Revoked on n1 while its link is open: the next frame on that link is
  // refused and the link closed, as a call would be refused.
  pki::RevocationList revoked;
  REQUIRE(
      revoked.RevokeIdentity(pki::IdentityKind::kNode, "n2", absl::Now()).ok());
  n1.trust().SetRevocations(revoked);
  m.body = membership::Ping{2, "n1"};
  CHECK(n2.Send("n1", n1.address(), membership::EncodeMessage(m)).ok());
  REQUIRE(WaitFor(
      [&] {
        auto t = Must(n1.membership().TransportStats());
        return t.links_refused == 1 && t.links_open == 0;
      },
      absl::Seconds(5)));
  CHECK(Must(n1.membership().Stats()).messages_received == received);
  CHECK(n2.arrived().size() == 1);
  // Once n2 sees its link end, a new one is refused at the door.
  REQUIRE(WaitFor([&] { return n2.transport().stats().links_open == 0; },
                  absl::Seconds(5)));
  m.body = membership::Ping{3, "n1"};
  CHECK_FALSE(n2.Send("n1", n1.address(), membership::EncodeMessage(m)).ok());
  CHECK(Must(n1.membership().Stats()).messages_received == received);

  // The dialing end: n3 trusts the mesh but holds n1 revoked, so the link
  // it dials to n1 never carries a frame.
  identity::Trust trust3;
  REQUIRE(trust3.SetCa(pki.ca_pem()).ok());
  pki::RevocationList revoked1;
  REQUIRE(revoked1.RevokeIdentity(pki::IdentityKind::kNode, "n1", absl::Now())
              .ok());
  trust3.SetRevocations(revoked1);
  TransportAs n3(pki, "n3", &loop, 256, absl::Seconds(10), &trust3);
  m.from = "n3";
  absl::Status s = n3.Send("n1", n1.address(), membership::EncodeMessage(m));
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK(n3.transport().stats().links_refused == 1);
  CHECK(Must(n1.membership().Stats()).messages_received == received);
}

TEST_CASE_FIXTURE(
    Served, "a flood down one link is paced by the node, which stays healthy") {
  TransportAs n3(pki, "n3", &loop);
  // n2, a member of the mesh, writes pings down one link as fast as gRPC
  // takes them (up to kFlood, which gRPC buffers at n2 faster than n1 can
  // take them), for 2 s, and never reads n1's acks.
  auto as_n2 = StubAs(pki, "n2", n1.address());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = as_n2->Link(&ctx);
  mycel::v1::GossipFrame frame;
  frame.set_message(membership::EncodeMessage(PingFrom("", 1, "")));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> written{0};
  std::thread flood([&] {
    constexpr int64_t kFlood = 100'000;
    while (!stop.load() && written.load() < kFlood && stream->Write(frame)) {
      ++written;
    }
  });
  const absl::Time flood_start = absl::Now();
  // Meanwhile n3 probes n1 every 100 ms and waits for each ack.
  int probes = 0, acked = 0;
  absl::Duration slowest;
  for (uint64_t seq = 1; absl::Now() - flood_start < absl::Seconds(2); ++seq) {
    const absl::Time sent = absl::Now();
    REQUIRE(n3.Send("n1", n1.address(),
                    membership::EncodeMessage(PingFrom("", seq, "")))
                .ok());
    ++probes;
    const bool got = AckArrives(n3, seq, absl::Seconds(1));
    acked += got;
    slowest = std::max(slowest, absl::Now() - sent);
    absl::SleepFor(absl::Milliseconds(100));
  }
  stop = true;
  ctx.TryCancel();
  flood.join();
  const membership::DriverStats st = Must(n1.membership().Stats());
  MESSAGE("n2 wrote ", written.load(), " frames; n1 handled ",
          st.messages_received, ", rejected ", st.messages_rejected,
          "; n3's slowest ack ", absl::FormatDuration(slowest));
  // The honest member is answered throughout, within the probe timeout.
  CHECK(acked == probes);
  CHECK(slowest < absl::Milliseconds(500));
  // n1 takes n2's frames one at a time (the link reads the next once the
  // last is handled) and drops none from its queue; what n2 wrote beyond
  // that waits at n2, behind HTTP/2 flow control. The rate limit refused
  // most of what n1 took.
  CHECK(st.deliveries_dropped == 0);
  CHECK(st.membership.rejected_rate_limited > 0);
  CHECK(st.messages_received >= static_cast<uint64_t>(probes));
}

TEST_CASE_FIXTURE(
    Served,
    "a member opening many links keeps two, and no one else loses one") {
  // An honest member's link.
  TransportAs n3(pki, "n3", &loop);
  membership::Message ping = PingFrom("n3", 1, "n1");
  REQUIRE(n3.Send("n1", n1.address(), membership::EncodeMessage(ping)).ok());
  // n2 opens 20 links and holds them all open: 5 each from 4 threads, on 4
  // connections, so that n1 accepts some of them at the same time.
  constexpr int kThreads = 4, kEach = 5;
  std::vector<std::unique_ptr<HeldLink>> held(kThreads * kEach);
  membership::Message from2 = ping;
  from2.from = "n2";
  mycel::v1::GossipFrame frame;
  frame.set_message(membership::EncodeMessage(from2));
  {
    std::vector<std::thread> openers;
    for (int t = 0; t < kThreads; ++t) {
      openers.emplace_back([&, t] {
        auto as_n2 = StubAs(pki, "n2", n1.address());
        for (int i = 0; i < kEach; ++i) {
          auto h = std::make_unique<HeldLink>();
          h->ctx.set_deadline(std::chrono::system_clock::now() +
                              std::chrono::seconds(30));
          h->stream = as_n2->Link(&h->ctx);
          // May fail: n1 can close this link before its frame arrives.
          h->stream->Write(frame);
          held[t * kEach + i] = std::move(h);
        }
      });
    }
    for (std::thread& t : openers) t.join();
  }
  // n1 closes n2's older links as newer ones come: two stay.
  membership::GrpcTransport::Stats t1;
  const bool settled =
      WaitFor(
          [&] {
            t1 = Must(n1.membership().TransportStats());
            return t1.links_accepted == 21 && t1.links_open == 3;
          },
          absl::Seconds(10))
          .has_value();
  REQUIRE_MESSAGE(settled, "accepted ", t1.links_accepted, " open ",
                  t1.links_open, " evicted ", t1.links_evicted, " dialed ",
                  t1.links_dialed, "\n", Must(n1.membership().DescribeLinks()));
  CHECK(Must(n1.membership().TransportStats()).links_evicted == 18);
  // The 18 closed end with RESOURCE_EXHAUSTED (which 18 is the order in
  // which n1 accepted them); the 2 kept end as the client closes them.
  // A link picked by two accepts at once would be counted twice, and one
  // link too many would stay open.
  mycel::v1::GossipFrame in;
  int exhausted = 0, ok = 0;
  for (auto& h : held) {
    h->stream->WritesDone();
    while (h->stream->Read(&in)) {
    }
    grpc::Status st = h->stream->Finish();
    exhausted += st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    ok += st.ok();
  }
  CHECK(exhausted == 18);
  CHECK(ok == 2);
  // n3's link is untouched: its next ping goes on it, no new dial.
  ping.body = membership::Ping{2, "n1"};
  CHECK(n3.Send("n1", n1.address(), membership::EncodeMessage(ping)).ok());
  CHECK(n3.transport().stats().links_dialed == 1);
  CHECK(WaitFor([&] { return n3.arrived().size() == 2; }, absl::Seconds(5)));
}

TEST_CASE("two nodes gossip both ways over the one link the joiner dialed") {
  testing::TempDir dir;
  Pki pki(dir.path());
  for (const char* n : {"n1", "n2"}) pki.Issue(n);
  Loop loop;
  Node n1(pki, "n1", &loop), n2(pki, "n2", &loop);
  REQUIRE(n1.Start({}).ok());
  REQUIRE(n2.Start({n1.address()}).ok());
  REQUIRE(WaitFor([&] { return n1.Alive() == 2 && n2.Alive() == 2; },
                  absl::Seconds(15)));
  // A few probe rounds each way (one a second).
  absl::SleepFor(absl::Seconds(3));
  const membership::DriverStats d1 = Must(n1.membership().Stats());
  CHECK(d1.membership.probes >= 2);
  CHECK(d1.membership.probes_failed == 0);
  CHECK(d1.send_failures == 0);
  CHECK(n1.Alive() == 2);
  CHECK(n2.Alive() == 2);
  const auto t1 = Must(n1.membership().TransportStats());
  const auto t2 = Must(n2.membership().TransportStats());
  // n1 never dialed n2: it answered and probed on n2's link.
  CHECK(t1.links_dialed == 0);
  CHECK(t1.links_accepted == 1);
  CHECK(t2.links_dialed == 1);
  CHECK(t1.links_open == 1);
  CHECK(t2.links_open == 1);
  CHECK(t1.frames_written > 0);
  CHECK(t1.frames_received > 0);
  // Stopping n2 ends the link at both ends.
  n2.membership().Stop();
  CHECK(WaitFor(
      [&] { return Must(n1.membership().TransportStats()).links_open == 0; },
      absl::Seconds(5)));
}

}  // namespace
}  // namespace mycel
