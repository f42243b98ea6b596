#include "tests/adversarial/adversarial.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "runtime/fs.h"

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

std::unique_ptr<HeldTls> HeldTls::Open(
    const char* source, int port, const std::string& cert_file,
    const std::string& key_file,
    const std::function<void()>& before_handshake) {
  // A write to a connection the server closed must fail, not end the test.
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<HeldTls> h(new HeldTls());
  h->fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (h->fd_ < 0) return nullptr;
  timeval tv{5, 0};
  setsockopt(h->fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(h->fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in src{};
  src.sin_family = AF_INET;
  if (inet_pton(AF_INET, source, &src.sin_addr) != 1 ||
      bind(h->fd_, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) {
    return nullptr;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(h->fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return nullptr;
  }
  if (before_handshake) before_handshake();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  h->ctx_ = ctx;
  if (ctx == nullptr) return nullptr;
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof(kAlpn));
  if (!cert_file.empty() &&
      (SSL_CTX_use_certificate_file(ctx, cert_file.c_str(), SSL_FILETYPE_PEM) !=
           1 ||
       SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) !=
           1)) {
    return nullptr;
  }
  SSL* ssl = SSL_new(ctx);
  h->ssl_ = ssl;
  if (ssl == nullptr || SSL_set_fd(ssl, h->fd_) != 1) return nullptr;
  // The server's certificate is not checked: an attacker's view.
  if (SSL_connect(ssl) != 1) return nullptr;
  static const char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\0\0\0\4\0\0\0\0\0";  // and an empty SETTINGS frame
  if (SSL_write(ssl, kPreface, sizeof(kPreface) - 1) !=
      static_cast<int>(sizeof(kPreface) - 1)) {
    return nullptr;
  }
  // The server's SETTINGS: the connection is up at the HTTP/2 layer too.
  char buf[256];
  if (SSL_read(ssl, buf, sizeof(buf)) <= 0) return nullptr;
  return h;
}

bool HeldTls::ClosedWithin(std::chrono::milliseconds timeout) {
  SSL* ssl = static_cast<SSL*>(ssl_);
  const auto end = std::chrono::steady_clock::now() + timeout;
  timeval tv{0, 100 * 1000};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[1024];
  while (std::chrono::steady_clock::now() < end) {
    errno = 0;
    const int n = SSL_read(ssl, buf, sizeof(buf));
    if (n > 0) continue;
    const int err = SSL_get_error(ssl, n);
    if (err == SSL_ERROR_ZERO_RETURN) return true;
    if (err == SSL_ERROR_SYSCALL && errno != EAGAIN && errno != EWOULDBLOCK) {
      return true;  // EOF (errno 0) or a reset
    }
    if (err == SSL_ERROR_SSL) return true;
  }
  return false;
}

int64_t StatusKb(pid_t pid, absl::string_view field) {
  auto status = ReadFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, field) ||
        !absl::ConsumePrefix(&line, ":")) {
      continue;
    }
    int64_t kb = 0;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (!words.empty() && absl::SimpleAtoi(words[0], &kb)) return kb;
  }
  return -1;
}

int64_t HeldTls::ResetStreams(const std::string& path, int64_t streams) {
  SSL* ssl = static_cast<SSL*>(ssl_);
  // The first stream's header block adds its six fields to the HPACK
  // dynamic table (RFC 7541 6.2.1, literal with incremental indexing); every
  // later one names them by index (6.1), six bytes, as a real client's
  // encoder would: cheap for the server to read, so that it reads faster
  // than it can finish calls.
  std::string first;
  auto field = [&first](absl::string_view name, absl::string_view value) {
    first.push_back('\x40');
    first.push_back(static_cast<char>(name.size()));
    first.append(name.data(), name.size());
    first.push_back(static_cast<char>(value.size()));
    first.append(value.data(), value.size());
  };
  field(":method", "POST");
  field(":scheme", "https");
  field(":path", path);
  field(":authority", "node");
  field("content-type", "application/grpc");
  field("te", "trailers");
  // The newest entry is index 62: te, content-type, ... :method at 67.
  const std::string indexed = {'\xc3', '\xc2', '\xc1', '\xc0', '\xbf', '\xbe'};
  auto frame_header = [](std::string* out, size_t length, uint8_t type,
                         uint8_t flags, uint32_t stream) {
    out->push_back(static_cast<char>((length >> 16) & 0xff));
    out->push_back(static_cast<char>((length >> 8) & 0xff));
    out->push_back(static_cast<char>(length & 0xff));
    out->push_back(static_cast<char>(type));
    out->push_back(static_cast<char>(flags));
    for (int shift = 24; shift >= 0; shift -= 8) {
      out->push_back(static_cast<char>((stream >> shift) & 0xff));
    }
  };
  constexpr int kBatch = 256;
  int64_t sent = 0;
  uint32_t id = 1;
  std::string batch;
  while (sent < streams) {
    batch.clear();
    const int64_t n = std::min<int64_t>(kBatch, streams - sent);
    for (int64_t i = 0; i < n; ++i, id += 2) {
      const std::string& block = id == 1 ? first : indexed;
      frame_header(&batch, block.size(), 0x1, 0x4, id);  // HEADERS
      batch.append(block);
      frame_header(&batch, 4, 0x3, 0x0, id);  // RST_STREAM
      batch.append("\0\0\0\x08", 4);          // CANCEL
    }
    if (SSL_write(ssl, batch.data(), static_cast<int>(batch.size())) !=
        static_cast<int>(batch.size())) {
      break;
    }
    sent += n;
  }
  return sent;
}

HeldTls::~HeldTls() {
  if (ssl_ != nullptr) SSL_free(static_cast<SSL*>(ssl_));
  if (ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
  if (fd_ >= 0) close(fd_);
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
