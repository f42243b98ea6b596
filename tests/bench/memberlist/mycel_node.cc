// mycel_node: one mycel node for memberlist_bench.sh. Runs myceld and speaks
// the bench's node contract (see the top of memberlist_bench.sh) on stdout.
//
//   mycel_node MYCELD NAME PORT SEEDS PKI_DIR WORK_DIR
//
// myceld serves 127.0.0.1:PORT with the node certificate in PKI_DIR (made
// from the bench's shared CA by gen-pki.sh) and joins through SEEDS
// (comma-separated HOST:PORT, empty for the first node). Member events come
// from myceld's log ("member joined", "member failed", "member left"),
// stamped when this adapter reads them (CLOCK_MONOTONIC, as mlnode -now);
// the pipe adds microseconds. Every log line is also copied to this
// adapter's stderr with that stamp, for diagnosis. BYTES on SIGUSR1 sums
// bytes_sent of myceld's TCP sockets open at that moment (ss -tinpH), so
// bytes of connections already closed are not counted, and gives the
// daemon's membership.bytes_sent (`mycel node stats`) as payload_bytes. myceld
// dies with this process (PR_SET_PDEATHSIG), so a SIGKILL of the node kills the
// daemon too.
//
// C++ rather than a script: 50 of these start at once on 2 CPUs, and a
// Python interpreter with its imports took 93 ms of CPU each (myceld
// itself takes 17-32 ms to serve, measured 2026-12-05), all of it counted
// in the launch.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/bench/memberlist/tcp_bytes.h"

namespace {

int64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void Out(const std::string& line) {
  std::string l = line + "\n";
  // One write per line, as the contract asks.
  if (write(STDOUT_FILENO, l.data(), l.size()) < 0) _exit(1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) parts.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// The daemon's membership.bytes_sent (`mycel node stats`): its messages'
// encoded bytes, before TLS, HTTP/2 and TCP. -1 when it cannot be read.
int64_t PayloadBytes(const std::string& cli, const std::string& socket) {
  const std::string command = "'" + cli + "' --socket '" + socket +
                              "' node stats membership.bytes_sent 2>/dev/null";
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return -1;
  int64_t value = -1;
  char line[256];
  while (fgets(line, sizeof(line), p) != nullptr) {
    long long v = 0;
    if (sscanf(line, "membership.bytes_sent %lld", &v) == 1) value = v;
  }
  if (pclose(p) != 0) return -1;
  return value;
}

// Bytes sent on the daemon's TCP sockets, how many sockets it has, and
// what of it is membership's messages.
void Bytes(pid_t daemon, const std::string& cli, const std::string& socket) {
  const int64_t t = Now();
  const mycel::bench::TcpBytes b = mycel::bench::TcpBytesOf(daemon);
  const int64_t payload = PayloadBytes(cli, socket);
  Out("BYTES " + std::to_string(t) +
      " reason=usr1 udp_bytes=0 udp_pkts=0 tcp_bytes=" +
      std::to_string(b.sent) + " tcp_conns=" + std::to_string(b.connections) +
      " payload_bytes=" + std::to_string(payload));
}

// Ends the daemon: SIGTERM, then SIGKILL after 5 s.
void Stop(pid_t daemon) {
  kill(daemon, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    if (waitpid(daemon, nullptr, WNOHANG) == daemon) return;
    usleep(10000);
  }
  kill(daemon, SIGKILL);
  waitpid(daemon, nullptr, 0);
}

// The value of `key="..."` or `key=VALUE` in a logfmt line, or "".
std::string Field(const std::string& line, const std::string& key) {
  const std::string k = " " + key + "=";
  size_t at = line.find(k);
  if (at == std::string::npos) return "";
  at += k.size();
  if (at < line.size() && line[at] == '"') {
    const size_t end = line.find('"', at + 1);
    return end == std::string::npos ? "" : line.substr(at + 1, end - at - 1);
  }
  size_t end = line.find_first_of(" \n", at);
  if (end == std::string::npos) end = line.size();
  return line.substr(at, end - at);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr,
            "usage: mycel_node MYCELD NAME PORT SEEDS PKI_DIR WORK_DIR\n");
    return 2;
  }
  const std::string myceld = argv[1], name = argv[2], port = argv[3],
                    seeds = argv[4], pki = argv[5], work = argv[6];
  if (mkdir(work.c_str(), 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "mycel_node: cannot make %s: %s\n", work.c_str(),
            strerror(errno));
    return 1;
  }
  // The CLI beside myceld in the build tree (build/daemon/myceld,
  // build/cli/mycel).
  const std::string cli =
      myceld.substr(0, myceld.rfind("/daemon/") + 1) + "cli/mycel";
  const std::string config = work + "/config.json";
  {
    std::string json = "{\"seeds\": [";
    bool first = true;
    for (const std::string& s : Split(seeds, ',')) {
      json += (first ? "\"" : ", \"") + s + "\"";
      first = false;
    }
    json += "]}\n";
    FILE* f = fopen(config.c_str(), "w");
    if (f == nullptr || fputs(json.c_str(), f) < 0 || fclose(f) != 0) {
      fprintf(stderr, "mycel_node: cannot write %s: %s\n", config.c_str(),
              strerror(errno));
      return 1;
    }
  }

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGUSR1);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  const int sigfd = signalfd(-1, &mask, SFD_CLOEXEC);

  int pipefd[2];
  if (sigfd < 0 || pipe2(pipefd, O_CLOEXEC) != 0) {
    perror("mycel_node: signalfd/pipe");
    return 1;
  }
  const std::string listen = "127.0.0.1:" + port;
  const std::string subtree = "mlbench/" + name;
  std::vector<std::string> args = {myceld,
                                   "--node-name",
                                   name,
                                   "--listen",
                                   listen,
                                   "--tls-cert",
                                   pki + "/server.crt",
                                   "--tls-key",
                                   pki + "/server.key",
                                   "--tls-ca",
                                   pki + "/ca.crt",
                                   "--state-dir",
                                   work + "/state",
                                   "--socket",
                                   work + "/sock",
                                   "--cgroup-subtree",
                                   subtree,
                                   "--cell-pool",
                                   "0",
                                   "--config",
                                   config};
  const pid_t parent = getpid();
  const pid_t daemon = fork();
  if (daemon < 0) {
    perror("mycel_node: fork");
    return 1;
  }
  if (daemon == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    sigprocmask(SIG_UNBLOCK, &mask, nullptr);
    dup2(pipefd[1], STDERR_FILENO);
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    std::vector<char*> argvv;
    for (std::string& a : args) argvv.push_back(a.data());
    argvv.push_back(nullptr);
    execv(myceld.c_str(), argvv.data());
    _exit(127);
  }
  close(pipefd[1]);

  // memberlist's DefaultLANConfig, which myceld's "lan" profile equals.
  Out("CONFIG name=" + name +
      " probe_interval_ms=1000 probe_timeout_ms=500 indirect_checks=3 "
      "suspicion_mult=4 gossip_interval_ms=200 gossip_nodes=3 "
      "push_pull_interval_ms=30000 transport=grpc-mtls");

  std::string pending;
  char buf[65536];
  pollfd fds[2] = {{pipefd[0], POLLIN, 0}, {sigfd, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo si;
      if (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGUSR1) {
          Bytes(daemon, cli, work + "/sock");
        } else {
          Stop(daemon);
          return 0;
        }
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      const ssize_t n = read(pipefd[0], buf, sizeof(buf));
      if (n <= 0) break;  // the daemon is gone
      const int64_t t = Now();
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        const std::string line = pending.substr(0, nl + 1);
        pending.erase(0, nl + 1);
        const std::string stamped = std::to_string(t) + " " + line;
        if (write(STDERR_FILENO, stamped.data(), stamped.size()) < 0) {
          // stderr gone: keep serving stdout
        }
        const std::string msg = Field(line, "msg");
        if (msg == "membership: gossiping over gRPC") {
          Out("START " + std::to_string(t) + " name=" + name +
              " addr=" + listen);
          Out("EVENT " + std::to_string(t) + " join " + name + " " + listen);
          continue;
        }
        const char* kind = msg == "member joined"   ? "join"
                           : msg == "member failed" ? "dead"
                           : msg == "member left"   ? "left"
                                                    : nullptr;
        const std::string member = Field(line, "member");
        if (kind != nullptr && !member.empty() && member != name) {
          Out("EVENT " + std::to_string(t) + " " + kind + " " + member + " -");
        }
      }
    }
  }
  Stop(daemon);
  return 0;
}
