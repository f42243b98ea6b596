// Helpers of the adversarial tier (tests/adversarial): the attacks a
// hardening issue found, kept running in CI.
#ifndef MYCEL_TESTS_ADVERSARIAL_ADVERSARIAL_H_
#define MYCEL_TESTS_ADVERSARIAL_ADVERSARIAL_H_

#include <grpcpp/grpcpp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"

namespace mycel::adversarial {

// Every attack here needs root (cgroups, namespaces, mounts). Each binary
// says MYCEL_TEST_REQUIRES(adversarial::NeedsRoot()), so that without root
// it is reported skipped to ctest, never passed.
inline std::string NeedsRoot() {
  return testing::Root("the adversarial tier: cgroups, namespaces, mounts");
}

std::shared_ptr<grpc::Channel> Channel(const testing::DaemonProcess& d);

std::chrono::system_clock::time_point Deadline(
    std::chrono::milliseconds from_now);

std::chrono::milliseconds Elapsed(std::chrono::steady_clock::time_point since);

// A field in kB of /proc/PID/status ("VmHWM", "VmRSS"), or -1.
int64_t StatusKb(pid_t pid, absl::string_view field);

// A connected socket, or -1.
int ConnectUnix(const std::string& path);
int ConnectTcp(int port);

// A TLS connection from `source` (an address of this host, such as
// "127.0.0.2") to 127.0.0.1:port that completes the handshake, with the
// client certificate in `cert_file` and `key_file` or none (both empty),
// and sends HTTP/2's preface, then says nothing more: what a client can
// hold open. Closed when destroyed.
class HeldTls {
 public:
  // nullptr when the server refused or closed the connection.
  // `before_handshake`, when given, runs once the TCP connection is made
  // and before the TLS handshake starts.
  static std::unique_ptr<HeldTls> Open(
      const char* source, int port, const std::string& cert_file = "",
      const std::string& key_file = "",
      const std::function<void()>& before_handshake = nullptr);
  // Whether the server closes the connection within `timeout` (anything it
  // sends before, such as its settings, is read and dropped).
  bool ClosedWithin(std::chrono::milliseconds timeout);
  // HTTP/2 rapid reset (CVE-2023-44487): opens `streams` streams calling
  // `path`, each reset (RST_STREAM, CANCEL) right after its headers, in
  // batches, as fast as the connection takes them. Returns how many were
  // written before a write failed (the server closed the connection).
  int64_t ResetStreams(const std::string& path, int64_t streams);
  HeldTls(const HeldTls&) = delete;
  HeldTls& operator=(const HeldTls&) = delete;
  ~HeldTls();

 private:
  HeldTls() = default;
  int fd_ = -1;
  void* ctx_ = nullptr;  // SSL_CTX
  void* ssl_ = nullptr;  // SSL
};

// A throwaway CA and certificates (packaging/gen-pki.sh).
class Pki {
 public:
  explicit Pki(std::string dir);
  // myceld flags to serve TCP on 127.0.0.1:port with these certificates.
  std::vector<std::string> ServerFlags(int port) const;
  // The CLI against 127.0.0.1:port with the client certificate.
  testing::CommandResult Cli(int port, std::vector<std::string> args) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace mycel::adversarial

#endif  // MYCEL_TESTS_ADVERSARIAL_ADVERSARIAL_H_
