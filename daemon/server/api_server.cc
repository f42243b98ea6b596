#include "daemon/server/api_server.h"

#include <errno.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& field,
                                    const std::string& path) {
  std::ifstream in(path);
  if (!in) return PosixError(absl::StrCat(field, ": open ", path), errno);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " is not a PEM file"));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MtlsCredentials(
    const mycel::v1::DaemonConfig& config) {
  ASSIGN_OR_RETURN(std::string cert, ReadPem("tls_cert", config.tls_cert()));
  ASSIGN_OR_RETURN(std::string key, ReadPem("tls_key", config.tls_key()));
  ASSIGN_OR_RETURN(std::string ca, ReadPem("tls_ca", config.tls_ca()));
  grpc::SslServerCredentialsOptions opts(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = ca;
  opts.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(opts);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(
    const mycel::v1::DaemonConfig& config,
    const std::vector<grpc::Service*>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<ApiServer> self(new ApiServer());
  self->socket_path_ = config.socket();

  grpc::ServerBuilder builder;
  // A node agent serves a handful of clients; keep the thread pool small so
  // that idle memory stays small.
  builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 2);
  grpc::ResourceQuota quota("myceld");
  quota.SetMaxThreads(16);
  builder.SetResourceQuota(quota);

  builder.AddListeningPort(absl::StrCat("unix:", config.socket()),
                           grpc::InsecureServerCredentials());
  int tcp_port = 0;
  bool want_tcp = false;
  if (!config.listen().empty()) {
    if (config.tls_cert().empty()) {
      log::Warn(
          "tcp listener disabled: --listen needs --tls-cert, --tls-key "
          "and --tls-ca (TCP is never served in plaintext)",
          {{"listen", config.listen()}});
    } else {
      ASSIGN_OR_RETURN(auto creds, MtlsCredentials(config));
      builder.AddListeningPort(config.listen(), creds, &tcp_port);
      want_tcp = true;
    }
  }
  for (grpc::Service* s : services) builder.RegisterService(s);

  // Create the socket with mode 0660 from the start (no window in which it
  // is world-accessible), then chmod to be independent of the umask.
  mode_t old_umask = umask(0117);
  self->server_ = builder.BuildAndStart();
  umask(old_umask);
  if (self->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve gRPC on unix:", config.socket(),
        want_tcp ? absl::StrCat(" and ", config.listen()) : "",
        ": bind failed (address in use, or directory not writable)"));
  }
  if (want_tcp && tcp_port == 0) {
    self->server_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("listen: cannot bind ", config.listen()));
  }
  if (chmod(config.socket().c_str(), 0660) != 0) {
    self->server_->Shutdown();
    return PosixError(absl::StrCat("chmod 0660 ", config.socket()), errno);
  }
  self->tcp_port_ = tcp_port;
  auto* health = self->server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus("mycel.v1.Node", true);
  return self;
}

ApiServer::~ApiServer() { Shutdown(std::chrono::milliseconds(0)); }

void ApiServer::Shutdown(std::chrono::milliseconds grace) {
  if (stopped_ || server_ == nullptr) return;
  stopped_ = true;
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  unlink(socket_path_.c_str());
}

}  // namespace mycel
