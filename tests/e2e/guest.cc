#include "tests/e2e/guest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/unique_fd.h"

namespace mycel::testing {
namespace {

// A loopback port that was free a moment ago. QEMU binds it a little later;
// another process taking it in between makes QEMU exit, which the waits
// below report.
int FreeLoopbackPort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return -1;
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  return ntohs(addr.sin_port);
}

int DecodeWait(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string ImageDir() { return std::string(MYCEL_BINARY_DIR) + "/image"; }

Guest::Guest(std::string image_dir, std::string console_path,
             std::string initrd, std::string append)
    : image_dir_(std::move(image_dir)),
      console_path_(std::move(console_path)),
      initrd_(std::move(initrd)),
      append_(std::move(append)) {}

Guest::~Guest() { Kill(); }

bool Guest::Start(std::string* error) {
  if (pid_ > 0) {
    *error = "guest already started";
    return false;
  }
  api_port_ = FreeLoopbackPort();
  if (api_port_ <= 0) {
    *error = std::string("no free loopback port: ") + strerror(errno);
    return false;
  }
  std::vector<std::string> args = {
      "/bin/bash", std::string(MYCEL_SOURCE_DIR) + "/packaging/image/boot.sh",
      image_dir_, "--api-port", std::to_string(api_port_)};
  if (!initrd_.empty()) args.insert(args.end(), {"--initrd", initrd_});
  if (!append_.empty()) args.insert(args.end(), {"--append", append_});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  UniqueFd console(open(console_path_.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!console || !null) {
    *error = "open " + console_path_ + " or /dev/null: " + strerror(errno);
    return false;
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + strerror(errno);
    return false;
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec. Its own session, so
    // Kill() reaches anything QEMU might start; killed with the test binary.
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(null.get(), STDIN_FILENO);
    dup2(console.get(), STDOUT_FILENO);
    dup2(console.get(), STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  pid_ = pid;
  exit_status_ = -1;
  return true;
}

bool Guest::Reaped() {
  if (pid_ <= 0) return true;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_status_ = DecodeWait(status);
    pid_ = -1;
    return true;
  }
  return false;
}

void Guest::Kill() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_status_ = DecodeWait(status);
  pid_ = -1;
}

bool Guest::WaitHealthy(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Reaped()) return false;
    // A short deadline per call: until the guest's network is up, the
    // forwarded connection hangs instead of being refused.
    if (Cli({"--timeout", "2", "node", "health"}).exit_code == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

bool Guest::WaitForConsole(const std::string& text,
                           std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // Read after checking for exit, so nothing written just before the exit
    // is missed.
    bool exited = Reaped();
    if (Console().find(text) != std::string::npos) return true;
    if (exited || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int Guest::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!Reaped()) {
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return exit_status_;
}

CommandResult Guest::Cli(std::vector<std::string> args) const {
  const std::string pki = image_dir_ + "/pki/";
  args.insert(
      args.begin(),
      {Binary("mycel"), "--node", "127.0.0.1:" + std::to_string(api_port_),
       "--tls-ca", pki + "ca.crt", "--tls-cert", pki + "client.crt",
       "--tls-key", pki + "client.key"});
  return Run(args);
}

std::string Guest::Console() const {
  std::ifstream in(console_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace mycel::testing
