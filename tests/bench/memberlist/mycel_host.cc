// mycel_host: many mycel membership nodes in one process, for
// memberlist_bench.sh --impl mycelhost. Issue 13 allows it: fitting 50
// nodes on 2 CPUs with one myceld each spends about 0.9 s of every run
// launching processes, each of which then sets up gRPC and OpenSSL on its
// own.
//
//   mycel_host PKI_ROOT WORK_DIR < COMMANDS
//
// Each node is what a myceld serving --listen with --tls-* files runs for
// membership, and nothing else: a Trust of the mesh CA, the TCP endpoint's
// Authorizer, an ApiServer endpoint (its own port, its own mutual-TLS
// credentials, the Gossip service), and a NodeMembership ("lan" profile,
// its own PeerChannels from its certificate files) with its member table in
// a SQLite store of its own (WORK_DIR/NAME.db). What the nodes share is
// the process: gRPC's threads and one io_context run by two threads (the
// machine's CPUs; a myceld runs one). No cgroups, no cells, no local API.
// "start" commands are carried out by four threads at once (below).
//
// Commands, one per line on stdin:
//   start NAME PORT SEEDS OUTFILE
//       serves NAME on 127.0.0.1:PORT with PKI_ROOT/NAME/{server.crt,
//       server.key,ca.crt} (gen-pki.sh's names), joins SEEDS (comma-separated
//       host:port, "-" for none), and writes the bench's CONFIG, START and
//       EVENT lines for NAME to OUTFILE (see memberlist_bench.sh);
//   kill NAME
//       stops NAME at once: its listener and connections close and its
//       membership stops, without a leave, as a SIGKILL would;
//   bytes
//       writes a BYTES line to every running node's OUTFILE: the bytes this
//       process has sent on the TCP sockets open now (ss), divided by the
//       running nodes, so each node gets the mean, not its own figure;
//   quit
// An error in a command is printed to stderr and ends the process (exit 1).
// Timestamps are CLOCK_MONOTONIC nanoseconds (as mlnode -now), taken in
// the membership callback, where mycel_node stamps a log line when it
// reads it from myceld's pipe (microseconds later).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "daemon/server/api_server.h"
#include "daemon/server/credentials.h"
#include "daemon/server/gossip_service.h"
#include "daemon/store/store.h"
#include "mesh/identity/access_rules.h"
#include "mesh/identity/authorizer.h"
#include "mesh/identity/trust.h"
#include "mesh/membership/node_membership.h"
#include "runtime/asio_clock.h"
#include "runtime/fs.h"
#include "runtime/listener.h"
#include "runtime/unique_fd.h"
#include "tests/bench/memberlist/tcp_bytes.h"
#include "tests/testing/io_loop.h"

namespace mycel {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "mycel_host: " << what << std::endl;
  _exit(1);
}

// A node's bench lines: one write(2) each, as the contract asks.
class Out {
 public:
  explicit Out(const std::string& path)
      : fd_(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                 0644)) {
    if (!fd_) Die(absl::StrCat("cannot open ", path));
  }
  void Line(const std::string& line) {
    const std::string l = line + "\n";
    absl::MutexLock lock(&mu_);
    if (write(fd_.get(), l.data(), l.size()) < 0) Die("write failed");
  }

 private:
  UniqueFd fd_;
  absl::Mutex mu_;
};

class Node {
 public:
  Node(testing::IoLoop* loop, const std::string& pki_root,
       const std::string& work, const std::string& name, int port,
       std::vector<std::string> seeds, const std::string& out_file)
      : name_(name), out_(std::make_shared<Out>(out_file)) {
    const std::string pki = absl::StrCat(pki_root, "/", name);
    TlsFiles files;
    files.cert_file = pki + "/server.crt";
    files.key_file = pki + "/server.key";
    files.ca_file = pki + "/ca.crt";
    files.cert = Must(ReadFile(files.cert_file));
    files.key = Must(ReadFile(files.key_file));
    files.ca = Must(ReadFile(files.ca_file));
    Check(trust_.SetCa(files.ca), "tls_ca");
    authz_ = std::make_shared<identity::Authorizer>(
        identity::Authorizer::Endpoint::kTcp, &trust_,
        &identity::AccessRules::Builtin(), &loop->clock);
    std::shared_ptr<grpc::ServerCredentials> creds =
        MtlsServerCredentials(files, absl::Minutes(1));
    creds->SetAuthMetadataProcessor(authz_);

    store::Store::Options so;
    so.origin = name;
    so.clock = &loop->clock;
    store_ = Must(store::Store::Open(absl::StrCat(work, "/", name, ".db"), so));

    gossip_ = std::make_unique<GossipService>(authz_.get(), &membership_);
    ApiServer::Endpoint e;
    e.name = "tcp";
    e.socket = Must(ListenTcp(absl::StrCat("127.0.0.1:", port)));
    e.credentials = std::move(creds);
    e.services = {gossip_.get()};
    std::vector<ApiServer::Endpoint> endpoints;
    endpoints.push_back(std::move(e));
    server_ = Must(ApiServer::Start(&loop->io, std::move(endpoints)));

    const std::string address = absl::StrCat("127.0.0.1:", port);
    // memberlist's DefaultLANConfig, which the "lan" profile equals.
    out_->Line(absl::StrCat(
        "CONFIG name=", name,
        " probe_interval_ms=1000 probe_timeout_ms=500 indirect_checks=3 "
        "suspicion_mult=4 gossip_interval_ms=200 gossip_nodes=3 "
        "push_pull_interval_ms=30000 transport=grpc-mtls host=shared"));
    membership::NodeMembership::Options o;
    o.name = name;
    o.advertise = address;
    o.seeds = std::move(seeds);
    o.ca_file = files.ca_file;
    o.cert_file = files.cert_file;
    o.key_file = files.key_file;
    o.trust = &trust_;
    o.clock = &loop->clock;
    o.io = &loop->io;
    o.store = store_.get();
    // The callback holds the file, not the node: one already posted may
    // run while a "kill" destroys the node.
    o.on_event = [out = out_, self = name](const membership::MemberEvent& e) {
      const char* kind = nullptr;
      switch (e.kind) {
        case membership::MemberEventKind::kJoined:
          kind = "join";
          break;
        case membership::MemberEventKind::kFailed:
          kind = "dead";
          break;
        case membership::MemberEventKind::kLeft:
          kind = "left";
          break;
        default:
          return;
      }
      if (e.name == self) return;
      out->Line(
          absl::StrCat("EVENT ", MonotonicNs(), " ", kind, " ", e.name, " -"));
    };
    Check(membership_.Start(std::move(o)), "membership");
    const int64_t t = MonotonicNs();
    out_->Line(absl::StrCat("START ", t, " name=", name, " addr=", address));
    out_->Line(absl::StrCat("EVENT ", t, " join ", name, " ", address));
  }

  // As a SIGKILL: no leave, every connection closed.
  ~Node() {
    server_->Shutdown(std::chrono::milliseconds(0));
    membership_.Stop();
  }

  // `bytes` and `conns` are the process's shares; the payload is this
  // node's own (its membership messages, encoded).
  void Bytes(int64_t t, uint64_t bytes, uint64_t conns) {
    absl::StatusOr<membership::DriverStats> stats = membership_.Stats();
    out_->Line(absl::StrCat(
        "BYTES ", t, " reason=usr1 udp_bytes=0 udp_pkts=0 tcp_bytes=", bytes,
        " tcp_conns=", conns, " payload_bytes=",
        stats.ok() ? static_cast<int64_t>(stats->bytes_sent) : -1));
  }

 private:
  template <typename T>
  T Must(absl::StatusOr<T> v) {
    if (!v.ok()) Die(absl::StrCat(name_, ": ", v.status().ToString()));
    return *std::move(v);
  }
  void Check(const absl::Status& s, const std::string& what) {
    if (!s.ok()) Die(absl::StrCat(name_, ": ", what, ": ", s.ToString()));
  }

  std::string name_;
  std::shared_ptr<Out> out_;
  identity::Trust trust_;
  std::shared_ptr<identity::Authorizer> authz_;
  std::unique_ptr<store::Store> store_;
  membership::NodeMembership membership_;
  std::unique_ptr<GossipService> gossip_;
  std::unique_ptr<ApiServer> server_;
};

// The nodes, made by `threads` threads at once (MYCEL_HOST_START_THREADS, 4
// by default), as 50 myceld start side by side. One thread making them in
// turn, while the first ones already gossip, took a median 1.17 s of a
// 50-node launch (50 myceld: 0.86 s); 2 threads 0.66-0.77 s, 4 threads
// 0.47-0.54 s, 8 threads 0.42-0.55 s (2 or 3 runs each, 2026-12-06).
class Nodes {
 public:
  Nodes(testing::IoLoop* loop, std::string pki_root, std::string work,
        int threads)
      : loop_(loop), pki_root_(std::move(pki_root)), work_(std::move(work)) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] { Work(); });
    }
  }
  ~Nodes() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
    }
    for (std::thread& t : threads_) t.join();
    nodes_.clear();
  }

  void Start(std::string name, int port, std::vector<std::string> seeds,
             std::string out) {
    absl::MutexLock lock(&mu_);
    if (nodes_.count(name) != 0 || !starting_.insert(name).second) {
      Die("start: " + name + " runs already");
    }
    queue_.push_back(
        Job{std::move(name), port, std::move(seeds), std::move(out)});
  }

  // After the starts queued so far.
  void Kill(const std::string& name) {
    std::unique_ptr<Node> node;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Nodes::Idle));
      auto it = nodes_.find(name);
      if (it == nodes_.end()) Die("kill: no node " + name);
      node = std::move(it->second);
      nodes_.erase(it);
    }
  }

  void Bytes() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Nodes::Idle));
    const bench::TcpBytes b = bench::TcpBytesOf(getpid());
    const int64_t t = MonotonicNs();
    const uint64_t n = nodes_.empty() ? 1 : nodes_.size();
    for (auto& [name, node] : nodes_) {
      node->Bytes(t, b.sent / n, b.connections / n);
    }
  }

 private:
  struct Job {
    std::string name;
    int port;
    std::vector<std::string> seeds;
    std::string out;
  };

  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && starting_.empty();
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || closing_;
  }

  void Work() {
    for (;;) {
      Job job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Nodes::HasWork));
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      auto node =
          std::make_unique<Node>(loop_, pki_root_, work_, job.name, job.port,
                                 std::move(job.seeds), job.out);
      absl::MutexLock lock(&mu_);
      starting_.erase(job.name);
      nodes_[job.name] = std::move(node);
    }
  }

  testing::IoLoop* const loop_;
  const std::string pki_root_;
  const std::string work_;
  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> starting_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Node>> nodes_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);
  int n = 0;
  return v != nullptr && absl::SimpleAtoi(v, &n) && n > 0 ? n : fallback;
}

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: mycel_host PKI_ROOT WORK_DIR < COMMANDS\n";
    return 2;
  }
  // As myceld does at start: Debian's Abseil checks the lock order of every
  // Mutex acquisition, gRPC's included.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // The event loop the nodes share: two threads (the machine's CPUs; a
  // myceld runs one), or MYCEL_HOST_IO_THREADS.
  testing::IoLoop loop(EnvInt("MYCEL_HOST_IO_THREADS", 2));
  Nodes nodes(&loop, argv[1], argv[2], EnvInt("MYCEL_HOST_START_THREADS", 4));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (w.empty()) continue;
    if (w[0] == "start" && w.size() == 5) {
      int port = 0;
      if (!absl::SimpleAtoi(w[2], &port)) Die("start: bad port " + w[2]);
      std::vector<std::string> seeds;
      if (w[3] != "-") seeds = absl::StrSplit(w[3], ',', absl::SkipEmpty());
      nodes.Start(w[1], port, std::move(seeds), w[4]);
    } else if (w[0] == "kill" && w.size() == 2) {
      nodes.Kill(w[1]);
    } else if (w[0] == "bytes" && w.size() == 1) {
      nodes.Bytes();
    } else if (w[0] == "quit" && w.size() == 1) {
      break;
    } else {
      Die("unknown command: " + line);
    }
  }
  return 0;
}

}  // namespace
}  // namespace mycel

int main(int argc, char** argv) { return mycel::Main(argc, argv); }
