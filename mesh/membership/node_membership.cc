#include "mesh/membership/node_membership.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel::membership {

NodeMembership::~NodeMembership() { Stop(); }

absl::Status NodeMembership::Start(Options options) {
  absl::MutexLock lock(&mu_);
  if (driver_ != nullptr || stopped_) {
    return absl::AlreadyExistsError("membership: already started");
  }
  if (options.trust == nullptr || options.clock == nullptr ||
      options.io == nullptr) {
    return absl::InvalidArgumentError(
        "membership: trust, clock and io are required");
  }
  if (options.advertise.empty()) {
    return absl::InvalidArgumentError(
        "advertise: membership needs the address peers reach this node at");
  }
  ASSIGN_OR_RETURN(Config config, ProfileByName(options.profile));
  if (options.dead_retention > absl::ZeroDuration()) {
    config.dead_retention = options.dead_retention;
    config.left_retention = options.dead_retention;
  }
  const std::string mesh = options.trust->mesh();
  if (mesh.empty()) {
    return absl::FailedPreconditionError(
        "membership: this node trusts no mesh CA yet");
  }
  // The node's own certificate must name it: otherwise every peer would
  // refuse its records (and its calls), which is better said once here.
  auto signer =
      std::make_unique<PkiSigner>(options.cert_file, options.key_file);
  {
    Alive probe;
    probe.name = options.name;
    RETURN_IF_ERROR(Annotate(signer->Sign(&probe), "membership"));
    auto verifier = std::make_unique<PkiVerifier>(options.trust, options.clock);
    absl::StatusOr<std::string> name = verifier->Verify(probe);
    if (!name.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "membership: this node's own certificate (", options.cert_file,
          ") is refused: ", name.status().message()));
    }
    verifier_ = std::move(verifier);
  }
  signer_ = std::move(signer);

  identity::PeerChannels* channels = options.channels;
  if (channels == nullptr) {
    identity::PeerChannels::Options peer;
    peer.mesh = mesh;
    peer.ca_file = options.ca_file;
    peer.cert_file = options.cert_file;
    peer.key_file = options.key_file;
    peer.refresh = options.refresh;
    channels_ = std::make_unique<identity::PeerChannels>(std::move(peer));
    channels = channels_.get();
  }
  GrpcTransport::Options transport;
  transport.channels = [channels](absl::string_view name,
                                  absl::string_view address) {
    return channels->Get(name, address);
  };
  transport.clock = options.clock;
  transport.trust = options.trust;
  // What arrives on a link goes where the Gossip service's frames go. The
  // transport is shut down (Stop) before this object goes away.
  transport.inbound = [this](std::string peer, std::string bytes,
                             std::function<void(std::string)> reply) {
    absl::Status s = DeliverWithReply(std::move(peer), std::move(bytes), reply);
    if (!s.ok()) reply("");
  };
  transport_ = std::make_unique<GrpcTransport>(std::move(transport));
  if (options.store != nullptr) {
    store_ = std::make_unique<MemberStore>(options.store);
  }

  DriverOptions d;
  d.membership.config = config;
  d.membership.name = options.name;
  d.membership.meta.addresses = {options.advertise};
  d.membership.random_seed = std::random_device{}();
  d.membership.signer = signer_.get();
  d.membership.verifier = verifier_.get();
  d.clock = options.clock;
  d.io = options.io;
  d.transport = transport_.get();
  d.store = store_.get();
  ASSIGN_OR_RETURN(driver_, MembershipDriver::Start(std::move(d)));
  // Operators (and tests/bench/memberlist_bench.sh) follow the mesh in the
  // log: a line per change of a member's state.
  driver_->Subscribe([](const MemberEvent& e) {
    const char* what = nullptr;
    switch (e.kind) {
      case MemberEventKind::kJoined:
        what = "member joined";
        break;
      case MemberEventKind::kFailed:
        what = "member failed";
        break;
      case MemberEventKind::kLeft:
        what = "member left";
        break;
      case MemberEventKind::kSuspected:
        what = "member suspected";
        break;
      case MemberEventKind::kRecovered:
        what = "member recovered";
        break;
      case MemberEventKind::kUpdated:
      case MemberEventKind::kRemoved:
        break;
    }
    if (what == nullptr) return;
    log::Info(what, {{"member", e.name}, {"incarnation", e.incarnation}});
  });
  if (options.on_event) driver_->Subscribe(std::move(options.on_event));
  if (!options.seeds.empty()) driver_->Join(options.seeds);
  log::Info("membership: gossiping over gRPC",
            {{"advertise", options.advertise},
             {"profile", options.profile},
             {"seeds", static_cast<int64_t>(options.seeds.size())}});
  return absl::OkStatus();
}

bool NodeMembership::running() const {
  absl::ReaderMutexLock lock(&mu_);
  return Driver().ok();
}

absl::StatusOr<MembershipDriver*> NodeMembership::Driver() const {
  if (driver_ == nullptr) {
    return absl::FailedPreconditionError(
        "membership is not running on this node: it runs once the node "
        "serves --listen with a node certificate of a mesh (mycel mesh "
        "init or join, or the --tls-* files)");
  }
  if (stopped_) {
    return absl::FailedPreconditionError(
        "membership is not running on this node: myceld is stopping");
  }
  return driver_.get();
}

absl::Status NodeMembership::Deliver(std::string peer, std::string bytes) {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(MembershipDriver * driver, Driver());
  driver->Deliver(std::move(peer), std::move(bytes));
  return absl::OkStatus();
}

absl::Status NodeMembership::DeliverWithReply(
    std::string peer, std::string bytes,
    std::function<void(std::string)> reply) {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(MembershipDriver * driver, Driver());
  driver->DeliverWithReply(std::move(peer), std::move(bytes), std::move(reply));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MemberInfo>> NodeMembership::Members() const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(MembershipDriver * driver, Driver());
  return driver->Members();
}

absl::StatusOr<std::string> NodeMembership::CertificateOf(
    absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(MembershipDriver * driver, Driver());
  std::optional<std::string> der = driver->CertificateOf(name);
  if (!der.has_value()) {
    return absl::NotFoundError(absl::StrCat("member ", name));
  }
  return *std::move(der);
}

absl::StatusOr<DriverStats> NodeMembership::Stats() const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(MembershipDriver * driver, Driver());
  return driver->Stats();
}

void NodeMembership::Leave(absl::Duration timeout,
                           MembershipDriver::Done done) {
  absl::Status refused;
  {
    absl::ReaderMutexLock lock(&mu_);
    absl::StatusOr<MembershipDriver*> driver = Driver();
    if (driver.ok()) {
      (*driver)->Leave(timeout, std::move(done));
      return;
    }
    refused = driver.status();
  }
  done(refused);
}

grpc::ServerBidiReactor<mycel::v1::GossipFrame, mycel::v1::GossipFrame>*
NodeMembership::AcceptLink(grpc::CallbackServerContext* context,
                           std::string peer, uint64_t admitted_at,
                           absl::Status* refused) {
  absl::ReaderMutexLock lock(&mu_);
  absl::StatusOr<MembershipDriver*> driver = Driver();
  if (!driver.ok()) {
    *refused = driver.status();
    return nullptr;
  }
  return transport_->Accept(context, std::move(peer), admitted_at);
}

absl::StatusOr<GrpcTransport::Stats> NodeMembership::TransportStats() const {
  absl::ReaderMutexLock lock(&mu_);
  RETURN_IF_ERROR(Driver().status());
  return transport_->stats();
}

absl::StatusOr<std::string> NodeMembership::DescribeLinks() const {
  absl::ReaderMutexLock lock(&mu_);
  RETURN_IF_ERROR(Driver().status());
  return transport_->DescribeLinks();
}

void NodeMembership::Stop() {
  GrpcTransport* transport = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    if (driver_ != nullptr) driver_->Stop();
    transport = transport_.get();
  }
  // Outside the lock: closing a link fails its waiting sends, whose
  // callbacks reach the (stopped) driver. The transport itself lives as
  // long as this object.
  if (transport != nullptr) transport->Shutdown();
}

}  // namespace mycel::membership
