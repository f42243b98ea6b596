// The authorization decision: the rule table, who a certificate makes a
// caller, and the Authorizer that combines them on every call.
#include <doctest/doctest.h>
#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "mesh/identity/access_rules.h"
#include "mesh/identity/authorizer.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate_authority.h"
#include "mycel/v1/cells.pb.h"
#include "mycel/v1/mesh.pb.h"
#include "mycel/v1/node.pb.h"
#include "runtime/manual_clock.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::identity {
namespace {

using pki::testing::Fails;
using pki::testing::MakeCa;
using pki::testing::Must;
using pki::testing::NodeId;
using pki::testing::T0;
using pki::testing::UserId;
constexpr auto kUnauth = absl::StatusCode::kUnauthenticated;
constexpr auto kDenied = absl::StatusCode::kPermissionDenied;

Caller User(const std::string& name, pki::Role role) {
  return {CallerKind::kUser, name, role};
}
Caller Node(const std::string& name) {
  return {CallerKind::kNode, name, pki::Role::kNode};
}

// The end of an empty property list (its constructor is protected).
struct NoProperties : grpc::AuthPropertyIterator {
  NoProperties() : grpc::AuthPropertyIterator() {}
};

// An auth context holding what gRPC's TLS stack would: the peer's PEM.
class FakeAuthContext final : public grpc::AuthContext {
 public:
  explicit FakeAuthContext(std::string pem = "", std::string spiffe = "")
      : pem_(std::move(pem)), spiffe_(std::move(spiffe)) {}
  bool IsPeerAuthenticated() const override { return !pem_.empty(); }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(
      const std::string& name) const override {
    if (name == GRPC_X509_PEM_CERT_PROPERTY_NAME && !pem_.empty()) {
      return {grpc::string_ref(pem_)};
    }
    if (name == GRPC_PEER_SPIFFE_ID_PROPERTY_NAME && !spiffe_.empty()) {
      return {grpc::string_ref(spiffe_)};
    }
    return {};
  }
  grpc::AuthPropertyIterator begin() const override { return NoProperties(); }
  grpc::AuthPropertyIterator end() const override { return NoProperties(); }
  void AddProperty(const std::string&, const grpc::string_ref&) override {}
  bool SetPeerIdentityPropertyName(const std::string&) override {
    return false;
  }

 private:
  std::string pem_;
  std::string spiffe_;
};

// A mesh CA and certificates it issues, as PEM.
struct Mesh {
  pki::CertificateAuthority ca = MakeCa("prod");
  std::string Issue(const pki::SpiffeId& id, pki::Role role,
                    absl::Time now = T0(),
                    absl::Duration validity = absl::ZeroDuration()) {
    pki::PrivateKey key = Must(pki::PrivateKey::Generate());
    return Must(Must(ca.IssueForKey(Must(key.GetPublicKey()),
                                    {id, role, validity}, now))
                    .ToPem());
  }
};

TEST_CASE("rule table: who may call what") {
  const AccessRules& rules = AccessRules::Builtin();
  const std::string read = "/mycel.v1.Node/GetInfo";
  const std::string write = "/mycel.v1.Cells/Create";
  const std::string peer = "/mycel.v1.MeshPeer/Renew";
  const std::string join = "/mycel.v1.MeshPeer/Join";
  const std::string health = "/grpc.health.v1.Health/Check";
  const std::string reflection =
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  Caller admin = User("alice", pki::Role::kAdmin);
  Caller viewer = User("bob", pki::Role::kViewer);
  Caller node = Node("b");
  Caller none;
  Caller local = Caller::Local();

  // Reads: users of either role and the local socket.
  CHECK(rules.Check(read, admin).ok());
  CHECK(rules.Check(read, viewer).ok());
  CHECK(rules.Check(read, local).ok());
  CHECK(Fails(rules.Check(read, node), kDenied,
              "node b may not call /mycel.v1.Node/GetInfo: rule read needs a "
              "viewer or admin user"));
  CHECK(Fails(rules.Check(read, none), kUnauth,
              "/mycel.v1.Node/GetInfo needs a client certificate of the mesh "
              "(rule read"));

  // Writes: admins and the local socket.
  CHECK(rules.Check(write, admin).ok());
  CHECK(rules.Check(write, local).ok());
  CHECK(Fails(rules.Check(write, viewer), kDenied,
              "user bob (viewer) may not call /mycel.v1.Cells/Create: rule "
              "write needs an admin user"));
  CHECK(Fails(rules.Check(write, node), kDenied, "rule write"));
  CHECK(Fails(rules.Check(write, none), kUnauth, "rule write"));

  // Peer RPCs: nodes only, not even an admin user or the local socket.
  CHECK(rules.Check(peer, node).ok());
  CHECK(Fails(rules.Check(peer, admin), kDenied,
              "rule peer needs a node of the mesh"));
  CHECK(Fails(rules.Check(peer, local), kDenied, "rule peer"));
  CHECK(Fails(rules.Check(peer, none), kUnauth, "rule peer"));

  // Join: anyone, without a certificate too.
  for (const Caller& c : {admin, viewer, node, none, local}) {
    CHECK(rules.Check(join, c).ok());
  }

  // Health: any identity, not an anonymous caller.
  CHECK(rules.Check(health, node).ok());
  CHECK(rules.Check(health, viewer).ok());
  CHECK(Fails(rules.Check(health, none), kUnauth, "rule identity"));

  // Reflection: never without a certificate.
  CHECK(rules.Check(reflection, viewer).ok());
  CHECK(Fails(rules.Check(reflection, none), kUnauth, "rule read"));
  CHECK(Fails(rules.Check(reflection, node), kDenied, "rule read"));

  // Unknown methods: denied to everyone, the local socket included.
  CHECK(Fails(rules.Check("/mycel.v1.Node/Reboot", local), kDenied,
              "rule none: unknown methods are denied"));
  CHECK(
      Fails(rules.Check("/mycel.v1.Node/Reboot", admin), kDenied, "rule none"));
  CHECK(Fails(rules.Check("", none), kUnauth, "rule none"));
}

TEST_CASE("rule table: one rule per method, each method fully named") {
  std::set<std::string> seen;
  for (const AccessRule& r : BuiltinAccessRules()) {
    std::string m(r.method);
    CHECK_MESSAGE(seen.insert(m).second, "two rules for ", m);
    CHECK_MESSAGE(m.size() > 3, m);
    CHECK_MESSAGE(m[0] == '/', m);
    CHECK_MESSAGE(m.find('/', 1) != std::string::npos, m);
  }
}

TEST_CASE("rule table: every method myceld serves has a rule") {
  const AccessRules& rules = AccessRules::Builtin();
  const google::protobuf::FileDescriptor* files[] = {
      mycel::v1::NodeInfo::descriptor()->file(),
      mycel::v1::CellSpec::descriptor()->file(),
      mycel::v1::MeshInfo::descriptor()->file(),
  };
  int methods = 0;
  for (const google::protobuf::FileDescriptor* f : files) {
    for (int i = 0; i < f->service_count(); ++i) {
      const google::protobuf::ServiceDescriptor* svc = f->service(i);
      for (int j = 0; j < svc->method_count(); ++j) {
        std::string name =
            absl::StrCat("/", svc->full_name(), "/", svc->method(j)->name());
        CHECK_MESSAGE(rules.Find(name) != nullptr, "no rule for ", name);
        ++methods;
      }
    }
  }
  CHECK(methods >= 21);
}

TEST_CASE("trust: a certificate becomes a caller, or is refused") {
  Mesh mesh;
  Trust trust;
  std::string node_pem = mesh.Issue(NodeId("b"), pki::Role::kNode);
  // Before a CA is trusted, nothing is.
  CHECK(Fails(trust.Identify(node_pem, T0()), kUnauth,
              "this node is not in a mesh"));
  REQUIRE(trust.SetCa(Must(mesh.ca.certificate().ToPem())).ok());
  CHECK(trust.mesh() == "prod");

  Caller node = Must(trust.Identify(node_pem, T0()));
  CHECK(node.kind == CallerKind::kNode);
  CHECK(node.name == "b");
  CHECK(node.role == pki::Role::kNode);

  std::string viewer_pem = mesh.Issue(UserId("bob"), pki::Role::kViewer);
  Caller viewer = Must(trust.Identify(viewer_pem, T0()));
  CHECK(viewer.kind == CallerKind::kUser);
  CHECK(viewer.name == "bob");
  CHECK(viewer.role == pki::Role::kViewer);
  CHECK_FALSE(viewer.is_admin());

  // No certificate: no identity, not an error.
  CHECK(Must(trust.Identify("", T0())).kind == CallerKind::kNone);

  // Another CA's certificate (of a mesh of the same name).
  Mesh other;
  CHECK(Fails(trust.Identify(other.Issue(NodeId("b"), pki::Role::kNode), T0()),
              kUnauth, "client certificate refused: issued by another CA"));
  // Expired.
  std::string short_lived =
      mesh.Issue(NodeId("c"), pki::Role::kNode, T0(), absl::Hours(1));
  CHECK(Must(trust.Identify(short_lived, T0())).name == "c");
  CHECK(Fails(trust.Identify(short_lived, T0() + absl::Hours(2)), kUnauth,
              "expired"));
  // Garbage.
  CHECK(Fails(trust.Identify("-----BEGIN CERTIFICATE-----\nAAAA\n", T0()),
              kUnauth, "client certificate refused"));
  // Revoked, by name and by serial, from the moment the list is replaced.
  CHECK_FALSE(trust.CouldRevoke(pki::IdentityKind::kNode, "b"));
  pki::RevocationList by_name;
  REQUIRE(by_name.RevokeIdentity(pki::IdentityKind::kNode, "b", T0()).ok());
  trust.SetRevocations(by_name);
  CHECK(trust.CouldRevoke(pki::IdentityKind::kNode, "b"));
  CHECK_FALSE(trust.CouldRevoke(pki::IdentityKind::kNode, "c"));
  CHECK_FALSE(trust.CouldRevoke(pki::IdentityKind::kUser, "b"));
  pki::RevocationList revoked;
  REQUIRE(revoked.RevokeIdentity(pki::IdentityKind::kNode, "b", T0()).ok());
  REQUIRE(revoked.RevokeSerial(viewer.serial, T0()).ok());
  trust.SetRevocations(revoked);
  // A serial could be any certificate's.
  CHECK(trust.CouldRevoke(pki::IdentityKind::kNode, "c"));
  CHECK(Fails(trust.Identify(node_pem, T0()), kUnauth, "revoked: node b"));
  CHECK(Fails(trust.Identify(viewer_pem, T0()), kUnauth, "revoked: serial"));
  // Another certificate of the same user is not revoked by that serial.
  CHECK(
      Must(trust.Identify(mesh.Issue(UserId("bob"), pki::Role::kViewer), T0()))
          .name == "bob");
  CHECK(trust.revocations().generation() == revoked.generation());
}

TEST_CASE(
    "authorizer: decides on each call from the connection's "
    "certificate") {
  Mesh mesh;
  Trust trust;
  REQUIRE(trust.SetCa(Must(mesh.ca.certificate().ToPem())).ok());
  ManualClock clock(T0());
  Authorizer tcp(Authorizer::Endpoint::kTcp, &trust, &AccessRules::Builtin(),
                 &clock);
  FakeAuthContext admin(mesh.Issue(UserId("alice"), pki::Role::kAdmin));
  FakeAuthContext viewer(mesh.Issue(UserId("bob"), pki::Role::kViewer));
  FakeAuthContext node(mesh.Issue(NodeId("b"), pki::Role::kNode));
  FakeAuthContext anonymous;
  Mesh other;
  FakeAuthContext stranger(other.Issue(UserId("alice"), pki::Role::kAdmin));

  CHECK(tcp.Decide("/mycel.v1.Cells/Create", admin).ok());
  CHECK(Fails(tcp.Decide("/mycel.v1.Cells/Create", viewer), kDenied,
              "user bob (viewer) may not call"));
  CHECK(Fails(tcp.Decide("/mycel.v1.Node/GetInfo", node), kDenied,
              "node b may not call /mycel.v1.Node/GetInfo"));
  CHECK(Fails(tcp.Decide("/mycel.v1.Node/GetInfo", anonymous), kUnauth,
              "needs a client certificate"));
  CHECK(Fails(tcp.Decide("/mycel.v1.Node/GetInfo", stranger), kUnauth,
              "issued by another CA"));
  // A refused certificate may still join, as no certificate may.
  CHECK(tcp.Decide("/mycel.v1.MeshPeer/Join", stranger).ok());
  CHECK(tcp.Decide("/mycel.v1.MeshPeer/Join", anonymous).ok());

  // Process reads the method from :path and counts denials.
  grpc::AuthMetadataProcessor::InputMetadata md;
  md.emplace(":path", "/mycel.v1.Cells/Create");
  grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
  CHECK(tcp.Process(md, &admin, &consumed, &response).ok());
  grpc::Status denied = tcp.Process(md, &viewer, &consumed, &response);
  CHECK(denied.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(tcp.denied() == 1);
  // No :path at all is an unknown method.
  grpc::AuthMetadataProcessor::InputMetadata no_path;
  CHECK(tcp.Process(no_path, &admin, &consumed, &response).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);

  // Revocation applies to the next call on the same connection.
  pki::RevocationList revoked;
  REQUIRE(revoked.RevokeIdentity(pki::IdentityKind::kUser, "alice", T0()).ok());
  trust.SetRevocations(revoked);
  CHECK(Fails(tcp.Decide("/mycel.v1.Cells/Create", admin), kUnauth,
              "revoked: user alice"));
  // Time passes on the clock the authorizer was given.
  FakeAuthContext brief(
      mesh.Issue(UserId("carol"), pki::Role::kViewer, T0(), absl::Hours(1)));
  CHECK(tcp.Decide("/mycel.v1.Node/GetInfo", brief).ok());
  clock.Advance(absl::Hours(2));
  CHECK(Fails(tcp.Decide("/mycel.v1.Node/GetInfo", brief), kUnauth, "expired"));

  // What a handler sees is what the decision used.
  Caller who = Must(tcp.CallerOf(viewer));
  CHECK(who.kind == CallerKind::kUser);
  CHECK(who.Describe() == "user bob (viewer)");

  // The local socket: every caller is its administrator, whatever the
  // context holds, and unknown methods stay closed.
  Authorizer local(Authorizer::Endpoint::kLocal, &trust,
                   &AccessRules::Builtin(), &clock);
  CHECK(Must(local.CallerOf(anonymous)).kind == CallerKind::kLocal);
  CHECK(local.Decide("/mycel.v1.Cells/Create", anonymous).ok());
  CHECK(Fails(local.Decide("/mycel.v1.MeshPeer/Renew", anonymous), kDenied,
              "the local socket may not call"));
  CHECK(Fails(local.Decide("/x.Y/Z", anonymous), kDenied, "rule none"));
}

}  // namespace
}  // namespace mycel::identity

namespace mycel::identity {
namespace {

TEST_CASE(
    "flood guard: calls that never reach a handler ban their identity; "
    "started ones and time forgive") {
  ManualClock clock(T0());
  std::vector<std::pair<std::string, int64_t>> floods;
  FloodGuard guard({.max_unstarted = 100,
                    .half_life = absl::Seconds(10),
                    .ban = absl::Minutes(5),
                    .clock = &clock,
                    .on_flood = [&](const std::string& who, int64_t n) {
                      floods.emplace_back(who, n);
                    }});
  const std::string mallory = "spiffe://prod/user/mallory";
  const std::string alice = "spiffe://prod/user/alice";
  // An honest client: each call reaches its handler.
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(guard.Opened(alice));
    guard.Started(alice);
  }
  // 99 calls that never start, then time: halved every 10 s.
  for (int i = 0; i < 99; ++i) REQUIRE(guard.Opened(mallory));
  clock.Advance(absl::Seconds(10));
  for (int i = 0; i < 50; ++i) REQUIRE(guard.Opened(mallory));  // 49 + 50
  CHECK(floods.empty());
  // The 100th outstanding: banned, said once.
  CHECK_FALSE(guard.Opened(mallory));
  REQUIRE(floods.size() == 1);
  CHECK(floods[0].first == mallory);
  CHECK(floods[0].second == 100);
  CHECK(guard.Banned(mallory));
  CHECK_FALSE(guard.Opened(mallory));
  CHECK(floods.size() == 1);
  CHECK(guard.bans() == 1);
  // Others go on.
  CHECK_FALSE(guard.Banned(alice));
  CHECK(guard.Opened(alice));
  // The ban ends, and the count starts over.
  clock.Advance(absl::Minutes(5));
  CHECK_FALSE(guard.Banned(mallory));
  CHECK(guard.Opened(mallory));

  // Through the authorizer: every call is counted before it is decided,
  // refused ones too (a flood of calls to a method the caller may not
  // call costs the node as much).
  Mesh mesh;
  Trust trust;
  REQUIRE(trust.SetCa(Must(mesh.ca.certificate().ToPem())).ok());
  Authorizer tcp(Authorizer::Endpoint::kTcp, &trust, &AccessRules::Builtin(),
                 &clock);
  tcp.set_flood_guard(&guard);
  FakeAuthContext viewer(mesh.Issue(UserId("bob"), pki::Role::kViewer),
                         "spiffe://prod/user/bob");
  grpc::AuthMetadataProcessor::InputMetadata md;
  md.emplace(":path", "/mycel.v1.Cells/Create");
  grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
  for (int i = 0; i < 99; ++i) {
    REQUIRE(tcp.Process(md, &viewer, &consumed, &response).error_code() ==
            grpc::StatusCode::PERMISSION_DENIED);
  }
  grpc::Status cut = tcp.Process(md, &viewer, &consumed, &response);
  CHECK(cut.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(cut.error_message().find("never reached this node") !=
        std::string::npos);
  CHECK(floods.size() == 2);
  CHECK(FloodGuard::IdentityOf(&viewer) == "spiffe://prod/user/bob");
  CHECK(FloodGuard::IdentityOf(nullptr).empty());
}

}  // namespace
}  // namespace mycel::identity
