#include "tests/adversarial/adversarial.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "absl/strings/str_cat.h"

namespace mycel::adversarial {

std::shared_ptr<grpc::Channel> Channel(const testing::DaemonProcess& d) {
  return grpc::CreateChannel("unix:" + d.socket(),
                             grpc::InsecureChannelCredentials());
}

std::chrono::system_clock::time_point Deadline(
    std::chrono::milliseconds from_now) {
  return std::chrono::system_clock::now() + from_now;
}

std::chrono::milliseconds Elapsed(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - since);
}

int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int ConnectTcp(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

Pki::Pki(std::string dir) : dir_(std::move(dir)) {
  testing::Run({std::string(MYCEL_SOURCE_DIR) + "/packaging/gen-pki.sh", dir_});
}

std::vector<std::string> Pki::ServerFlags(int port) const {
  return {"--listen",   absl::StrCat("127.0.0.1:", port),
          "--tls-cert", dir_ + "/server.crt",
          "--tls-key",  dir_ + "/server.key",
          "--tls-ca",   dir_ + "/ca.crt"};
}

testing::CommandResult Pki::Cli(int port, std::vector<std::string> args) const {
  std::vector<std::string> argv = {testing::Binary("mycel"),
                                   "--node",
                                   absl::StrCat("127.0.0.1:", port),
                                   "--tls-ca",
                                   dir_ + "/ca.crt",
                                   "--tls-cert",
                                   dir_ + "/client.crt",
                                   "--tls-key",
                                   dir_ + "/client.key"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::Run(argv);
}

}  // namespace mycel::adversarial
