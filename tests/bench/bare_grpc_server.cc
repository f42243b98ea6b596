// The anchor for myceld's idle memory: a bare gRPC C++ server with the
// health service and reflection, on a unix socket, linked against the same
// Debian shared libraries. It serves until SIGTERM.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: bare_grpc_server SOCKET\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(std::string("unix:") + argv[1],
                           grpc::InsecureServerCredentials());
  auto server = builder.BuildAndStart();
  if (!server) return 1;
  fprintf(stderr, "ready\n");
  int sig;
  sigwait(&set, &sig);
  server->Shutdown();
  return 0;
}
