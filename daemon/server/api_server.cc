#include "daemon/server/api_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "runtime/log.h"

namespace mycel {
namespace {

// See Start: short calls in progress at once, per endpoint.
constexpr int kMaxSyncThreads = 256;

}  // namespace

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(
    boost::asio::io_context* io, std::vector<Endpoint> endpoints) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<ApiServer> self(new ApiServer());
  for (Endpoint& e : endpoints) {
    grpc::ServerBuilder builder;
    // Calls that wait (Wait, Stop, Logs, Run, Watch, and State.Put and
    // Delete, which wait for their group commit) use the callback API and
    // hold no thread. The sync pool grows with concurrent short calls and
    // shrinks back to MAX_POLLERS idle threads, so idle memory stays small;
    // its cap is the number of short calls in progress at once beyond
    // which a call is refused with RESOURCE_EXHAUSTED (16 refused a 14th
    // concurrent State.Put when puts were sync calls).
    builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::MIN_POLLERS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 2);
    grpc::ResourceQuota quota(absl::StrCat("myceld-", e.name));
    quota.SetMaxThreads(kMaxSyncThreads);
    // Calls are small: no bandwidth-delay probe PINGs after each one.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder.SetResourceQuota(quota);
    builder.AddChannelArgument(
        GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
        static_cast<int>(absl::ToInt64Milliseconds(kHandshakeTimeout)));
    auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        e.credentials);
    for (grpc::Service* s : e.services) builder.RegisterService(s);
    if (!e.interceptors.empty()) {
      builder.experimental().SetInterceptorCreators(std::move(e.interceptors));
    }
    Running r;
    r.name = e.name;
    r.port = e.socket.port;
    r.server = builder.BuildAndStart();
    if (r.server == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot start the gRPC server for ", e.name));
    }
    r.acceptor = std::move(acceptor);
    auto* health = r.server->GetHealthCheckService();
    health->SetServingStatus(true);
    health->SetServingStatus("mycel.v1.Node", true);

    Listener::Options lo;
    lo.name = e.name;
    lo.admit = std::move(e.admit);
    lo.per_source_burst = e.per_source_burst;
    lo.per_source_open = e.per_source_open;
    lo.window = std::move(e.window);
    const int listener_fd = e.socket.fd.get();
    grpc::experimental::ExternalConnectionAcceptor* handoff = r.acceptor.get();
    lo.on_connection = [handoff, listener_fd](UniqueFd fd) {
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
      p.listener_fd = listener_fd;
      p.fd = fd.release();  // the server owns it from here
      handoff->HandleNewConnection(&p);
    };
    r.listener = std::make_unique<Listener>(io, std::move(e.socket), lo);
    r.listener->Start();
    self->endpoints_.push_back(std::move(r));
  }
  return self;
}

ApiServer::~ApiServer() { Shutdown(std::chrono::milliseconds(0)); }

int ApiServer::port(absl::string_view name) const {
  for (const Running& r : endpoints_) {
    if (r.name == name) return r.port;
  }
  return 0;
}

size_t ApiServer::ShutdownConnections(absl::string_view name) {
  for (Running& r : endpoints_) {
    if (r.name == name && r.listener != nullptr) {
      return r.listener->ShutdownOpen();
    }
  }
  return 0;
}

size_t ApiServer::ShutdownWindowConnections(absl::string_view name,
                                            absl::Duration ban_sources) {
  for (Running& r : endpoints_) {
    if (r.name == name && r.listener != nullptr) {
      return r.listener->ShutdownWindowConnections(ban_sources);
    }
  }
  return 0;
}

void ApiServer::SetServingStatus(absl::string_view endpoint,
                                 const std::string& service, bool serving) {
  if (stopped_) return;
  for (Running& r : endpoints_) {
    if (r.name == endpoint) {
      r.server->GetHealthCheckService()->SetServingStatus(service, serving);
    }
  }
}

Listener::Stats ApiServer::listener_stats(absl::string_view name) const {
  for (const Running& r : endpoints_) {
    if (r.name == name) return r.listener->stats();
  }
  return {};
}

void ApiServer::Shutdown(std::chrono::milliseconds grace) {
  if (stopped_) return;
  stopped_ = true;
  for (Running& r : endpoints_) {
    r.server->GetHealthCheckService()->SetServingStatus(false);
    r.listener->Close();
  }
  const auto deadline = std::chrono::system_clock::now() + grace;
  for (Running& r : endpoints_) {
    r.server->Shutdown(deadline);
    r.server->Wait();
  }
}

}  // namespace mycel
