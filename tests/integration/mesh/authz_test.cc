// Real myceld processes on loopback TCP with mutual TLS: who may call what,
// as a client sees it (status codes, exit codes, what did not change).
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "mesh/pki/certificate_authority.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "mycel/v1/node.grpc.pb.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

template <typename T>
T Must(absl::StatusOr<T> v) {
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *std::move(v);
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::unique_ptr<grpc::ClientContext> Call() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
  return ctx;
}

// A credential pair written to `dir`/NAME.crt and NAME.key.
struct Credential {
  std::string cert;
  std::string key;
};

// A node's PKI as packaging/gen-pki.sh writes it (a mesh CA "local", the
// node's certificate, an admin user), plus identities the test issues with
// the same CA through mesh/pki.
class Pki {
 public:
  explicit Pki(std::string dir) : dir_(std::move(dir)) {
    auto gen = testing::Run(
        {std::string(MYCEL_SOURCE_DIR) + "/packaging/gen-pki.sh", dir_});
    REQUIRE_MESSAGE(gen.exit_code == 0, gen.err);
    ca_pem_ = Must(ReadFile(dir_ + "/ca.crt"));
    ca_.emplace(Must(pki::CertificateAuthority::Load(
        ca_pem_, Must(ReadFile(dir_ + "/ca.key")))));
  }

  std::vector<std::string> ServerFlags(const std::string& addr) const {
    return {"--listen",   addr,
            "--tls-cert", dir_ + "/server.crt",
            "--tls-key",  dir_ + "/server.key",
            "--tls-ca",   dir_ + "/ca.crt"};
  }
  const std::string& ca_pem() const { return ca_pem_; }
  Credential Admin() const {
    return {Must(ReadFile(dir_ + "/client.crt")),
            Must(ReadFile(dir_ + "/client.key"))};
  }
  // A certificate for `kind`/`name` with `role`, issued at `now`.
  Credential Issue(pki::IdentityKind kind, const std::string& name,
                   pki::Role role, absl::Time now = absl::Now(),
                   absl::Duration validity = absl::ZeroDuration()) const {
    return IssueWith(*ca_, kind, name, role, now, validity);
  }
  static Credential IssueWith(const pki::CertificateAuthority& ca,
                              pki::IdentityKind kind, const std::string& name,
                              pki::Role role, absl::Time now = absl::Now(),
                              absl::Duration validity = absl::ZeroDuration()) {
    pki::PrivateKey key = Must(pki::PrivateKey::Generate());
    pki::SpiffeId id = Must(pki::SpiffeId::Create(kind, ca.mesh(), name));
    pki::Certificate cert = Must(
        ca.IssueForKey(Must(key.GetPublicKey()), {id, role, validity}, now));
    return {Must(cert.ToPem()), Must(key.ToPem())};
  }
  // Writes `c` as DIR/NAME.crt and NAME.key; returns the CLI's TLS flags.
  std::vector<std::string> CliFlags(const std::string& name,
                                    const Credential& c) const {
    std::string crt = dir_ + "/" + name + ".crt";
    std::string key = dir_ + "/" + name + ".key";
    REQUIRE(WriteFileAtomic(crt, c.cert, 0644).ok());
    REQUIRE(WriteFileAtomic(key, c.key, 0600).ok());
    return {"--tls-ca", dir_ + "/ca.crt", "--tls-cert", crt, "--tls-key", key};
  }

 private:
  std::string dir_;
  std::string ca_pem_;
  std::optional<pki::CertificateAuthority> ca_;
};

// A channel to `addr` trusting `ca_pem`, presenting `client` (none when its
// cert is empty).
std::shared_ptr<grpc::Channel> TlsChannel(const std::string& addr,
                                          const std::string& ca_pem,
                                          const Credential& client) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  ssl.pem_cert_chain = client.cert;
  ssl.pem_private_key = client.key;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  return grpc::CreateCustomChannel(addr, grpc::SslCredentials(ssl), args);
}

grpc::StatusCode GetInfoCode(const std::shared_ptr<grpc::Channel>& ch,
                             std::string* message = nullptr) {
  auto stub = mycel::v1::Node::NewStub(ch);
  mycel::v1::NodeInfo info;
  grpc::Status st = stub->GetInfo(Call().get(), {}, &info);
  if (message != nullptr) *message = st.error_message();
  return st.error_code();
}

struct Fixture {
  TempDir dir;
  Pki pki{dir.Sub("pki")};
  std::string addr = absl::StrCat("127.0.0.1:", FreePort());
  DaemonProcess daemon{dir.path(), pki.ServerFlags(addr)};
  std::string mycel = testing::Binary("mycel");

  testing::CommandResult Cli(const std::vector<std::string>& tls,
                             std::vector<std::string> args) {
    std::vector<std::string> argv = {mycel, "--node", addr};
    argv.insert(argv.end(), tls.begin(), tls.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(argv);
  }
};

TEST_CASE(
    "roles: an admin changes state, a viewer reads and changes "
    "nothing") {
  Fixture f;
  REQUIRE(f.daemon.Start());
  auto admin = f.pki.CliFlags("admin", f.pki.Admin());
  auto viewer = f.pki.CliFlags(
      "viewer",
      f.pki.Issue(pki::IdentityKind::kUser, "bob", pki::Role::kViewer));

  auto info = f.Cli(viewer, {"-o", "json", "node", "info"});
  CHECK(info.exit_code == 0);
  CHECK(info.out.find("\"name\": \"test-node\"") != std::string::npos);

  // A viewer creating a cell: PERMISSION_DENIED naming the identity and
  // the rule; no cell appears.
  auto create = f.Cli(viewer, {"cell", "create", "web"});
  CHECK(create.exit_code == 1);
  CHECK(create.out.empty());
  CHECK(create.err ==
        "mycel: user bob (viewer) may not call /mycel.v1.Cells/Create: rule "
        "write needs an admin user\n");
  auto ls = f.daemon.Cli({"-o", "json", "cell", "ls"});
  REQUIRE(ls.exit_code == 0);
  CHECK(ls.out.find("\"web\"") == std::string::npos);

  // A viewer shutting the node down: refused, and the node still answers.
  auto stop = f.Cli(viewer, {"node", "shutdown"});
  CHECK(stop.exit_code == 1);
  CHECK(stop.err.find("rule write") != std::string::npos);
  CHECK(f.daemon.Cli({"node", "health"}).exit_code == 0);

  // The same calls with the generated client of the API: the status code.
  auto ch = TlsChannel(
      f.addr, f.pki.ca_pem(),
      f.pki.Issue(pki::IdentityKind::kUser, "bob", pki::Role::kViewer));
  auto cells = mycel::v1::Cells::NewStub(ch);
  mycel::v1::CreateCellRequest req;
  req.mutable_spec()->set_name("web2");
  mycel::v1::Cell cell;
  CHECK(cells->Create(Call().get(), req, &cell).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);

  // The admin may.
  auto made = f.Cli(admin, {"cell", "create", "web"});
  CHECK_MESSAGE(made.exit_code == 0, made.err);
  ls = f.daemon.Cli({"-o", "json", "cell", "ls"});
  CHECK(ls.out.find("\"web\"") != std::string::npos);
  CHECK(f.Cli(admin, {"cell", "rm", "web"}).exit_code == 0);
}

TEST_CASE("a node certificate cannot call a user RPC") {
  Fixture f;
  REQUIRE(f.daemon.Start());
  auto ch =
      TlsChannel(f.addr, f.pki.ca_pem(),
                 f.pki.Issue(pki::IdentityKind::kNode, "b", pki::Role::kNode));
  std::string msg;
  CHECK(GetInfoCode(ch, &msg) == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(msg ==
        "node b may not call /mycel.v1.Node/GetInfo: rule read needs a viewer "
        "or admin user");
  // It is an identity of the mesh: health answers it.
  auto health = grpc::health::v1::Health::NewStub(ch);
  grpc::health::v1::HealthCheckResponse resp;
  CHECK(health->Check(Call().get(), {}, &resp).ok());
}

TEST_CASE("without a client certificate: the connection is closed") {
  // This node is no authority (it serves --tls-* files), so it serves no
  // joins and takes no connection without a certificate: the handshake
  // ends and the server closes it, before any stream (docs/security.md;
  // an authority refuses such a caller each method but Mesh.GetCa and
  // Mesh.Admit, join_integration_test).
  Fixture f;
  REQUIRE(f.daemon.Start());
  auto ch = TlsChannel(f.addr, f.pki.ca_pem(), {});
  std::string msg;
  CHECK(GetInfoCode(ch, &msg) == grpc::StatusCode::UNAVAILABLE);
  auto health = grpc::health::v1::Health::NewStub(ch);
  grpc::health::v1::HealthCheckResponse resp;
  CHECK(health->Check(Call().get(), {}, &resp).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  auto refl = grpc::reflection::v1alpha::ServerReflection::NewStub(ch);
  auto ctx = Call();
  auto stream = refl->ServerReflectionInfo(ctx.get());
  grpc::reflection::v1alpha::ServerReflectionRequest rq;
  rq.set_list_services("");
  stream->Write(rq);
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse rs;
  CHECK_FALSE(stream->Read(&rs));
  CHECK(stream->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  // The admin's certificate opens the same call.
  CHECK(GetInfoCode(TlsChannel(f.addr, f.pki.ca_pem(), f.pki.Admin())) ==
        grpc::StatusCode::OK);
  // Plaintext TCP is not served at all.
  auto plain = mycel::v1::Node::NewStub(
      grpc::CreateChannel(f.addr, grpc::InsecureChannelCredentials()));
  mycel::v1::NodeInfo info;
  CHECK(plain->GetInfo(Call().get(), {}, &info).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("a certificate of another CA is refused") {
  Fixture f;
  REQUIRE(f.daemon.Start());
  // Another CA of a mesh with the same name.
  auto other = Must(pki::CertificateAuthority::Create("local", absl::Now()));
  Credential stranger = Pki::IssueWith(other, pki::IdentityKind::kUser, "admin",
                                       pki::Role::kAdmin);
  CHECK(GetInfoCode(TlsChannel(f.addr, f.pki.ca_pem(), stranger)) ==
        grpc::StatusCode::UNAVAILABLE);
  // (An expired certificate cannot be made here: the CA gen-pki.sh writes
  // starts now. identity_test covers expiry, on the handshake's certificate
  // and on later calls.)
  // The node still serves its admin.
  CHECK(GetInfoCode(TlsChannel(f.addr, f.pki.ca_pem(), f.pki.Admin())) ==
        grpc::StatusCode::OK);
}

TEST_CASE("--tls-ca must be a mesh CA") {
  TempDir dir;
  std::string pki = dir.Sub("pki");
  REQUIRE(MakeDirs(pki, 0700).ok());
  auto gen = testing::Shell(absl::StrCat(
      "cd ", pki,
      " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
      "-nodes -keyout ca.key -out ca.crt -subj /CN=plain -days 1 "
      "2>/dev/null && cp ca.crt s.crt && cp ca.key s.key"));
  REQUIRE(gen.exit_code == 0);
  DaemonProcess d(dir.path(),
                  {"--listen", absl::StrCat("127.0.0.1:", FreePort()),
                   "--tls-cert", pki + "/s.crt", "--tls-key", pki + "/s.key",
                   "--tls-ca", pki + "/ca.crt"});
  CHECK_FALSE(d.Start());
  CHECK(d.Log().find("tls_ca: mesh CA") != std::string::npos);
}

}  // namespace
}  // namespace mycel
