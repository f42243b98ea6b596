// Starts real myceld processes and talks to them with the mycel CLI and with
// clients generated from the .proto files.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "mycel/v1/node.grpc.pb.h"
#include "runtime/fs.h"
#include "tests/testing/ports.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

using testing::DaemonProcess;
using testing::FreePort;
using testing::TempDir;

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& socket) {
  return grpc::CreateChannel("unix:" + socket,
                             grpc::InsecureChannelCredentials());
}

std::unique_ptr<grpc::ClientContext> Call() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
  return ctx;
}

TEST_CASE("GetInfo over the unix socket with a generated client") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto stub = mycel::v1::Node::NewStub(UnixChannel(d.socket()));
  mycel::v1::NodeInfo info;
  grpc::Status st = stub->GetInfo(Call().get(), {}, &info);
  REQUIRE(st.ok());
  CHECK(info.name() == "test-node");
  CHECK(info.version() == "0.1.0");
  CHECK(info.pid() == d.pid());
  CHECK(info.state_dir() == d.state_dir());
  CHECK(info.schema_version() >= 1);
  struct utsname u;
  uname(&u);
  CHECK(info.kernel_release() == u.release);
  CHECK(info.cgroup_mode() != mycel::v1::CGROUP_MODE_UNSPECIFIED);
  // The socket is for local administration: owner and group only.
  struct stat sb;
  REQUIRE(stat(d.socket().c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0660);
  CHECK(d.Signal(SIGTERM) == 0);
  CHECK(access(d.socket().c_str(), F_OK) != 0);  // removed on the way out
}

TEST_CASE("the mycel CLI reads node info as a table and as stable JSON") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto table = d.Cli({"node", "info"});
  CHECK(table.exit_code == 0);
  CHECK(table.out.find("NAME") != std::string::npos);
  CHECK(table.out.find("test-node") != std::string::npos);
  CHECK(table.out.find("CGROUP MODE") != std::string::npos);

  auto json = d.Cli({"-o", "json", "node", "info"});
  REQUIRE(json.exit_code == 0);
  mycel::v1::NodeInfo info;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json.out, &info).ok());
  CHECK(info.name() == "test-node");
  CHECK(info.pid() == d.pid());
  CHECK(json.out.find("\"kernel_release\"") != std::string::npos);
  // Field names are proto names and defaults are printed, so scripts can
  // rely on every key being there.
  CHECK(json.out.find("\"kvm\"") != std::string::npos);

  auto health = d.Cli({"node", "health"});
  CHECK(health.exit_code == 0);
  CHECK(health.out == "SERVING\n");
  CHECK(d.Cli({"node", "health", "--service", "mycel.v1.Node"}).exit_code == 0);
  auto unknown = d.Cli({"node", "health", "--service", "nope.Service"});
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.err ==
        "mycel: health: service \"nope.Service\" is not known to myceld\n");
}

TEST_CASE("node stats: the node's counters, sorted, by prefix, as JSON") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto json = d.Cli({"-o", "json", "node", "stats"});
  REQUIRE(json.exit_code == 0);
  mycel::v1::NodeStats stats;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json.out, &stats).ok());
  std::vector<std::string> names;
  int64_t accepted = -1;
  for (const mycel::v1::Counter& c : stats.counters()) {
    names.push_back(c.name());
    if (c.name() == "listener.unix.accepted") accepted = c.value();
  }
  CHECK(std::is_sorted(names.begin(), names.end()));
  // This CLI's own connection, at least.
  CHECK(accepted >= 1);
  CHECK(std::find(names.begin(), names.end(), "api.flood_bans") != names.end());
  // Outside a mesh nothing gossips: no membership or replication counters.
  for (const std::string& n : names) {
    CHECK_FALSE(absl::StartsWith(n, "membership."));
    CHECK_FALSE(absl::StartsWith(n, "replication."));
  }
  auto table = d.Cli({"node", "stats", "listener.unix."});
  REQUIRE(table.exit_code == 0);
  CHECK(absl::StartsWith(table.out, "COUNTER"));
  CHECK(table.out.find("listener.unix.accepted") != std::string::npos);
  CHECK(table.out.find("api.") == std::string::npos);
  auto long_prefix = d.Cli({"node", "stats", std::string(300, 'a')});
  CHECK(long_prefix.exit_code == 1);
  CHECK(long_prefix.err.find("prefix: 300 bytes, more than 256") !=
        std::string::npos);
  CHECK(d.Cli({"node", "stats", "a", "b"}).exit_code == 2);
}

TEST_CASE("the standard health service and reflection answer any client") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto channel = UnixChannel(d.socket());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckResponse hr;
  REQUIRE(health->Check(Call().get(), {}, &hr).ok());
  CHECK(hr.status() == grpc::health::v1::HealthCheckResponse::SERVING);

  using grpc::reflection::v1alpha::ServerReflection;
  using grpc::reflection::v1alpha::ServerReflectionRequest;
  using grpc::reflection::v1alpha::ServerReflectionResponse;
  auto refl = ServerReflection::NewStub(channel);
  auto ctx = Call();
  auto stream = refl->ServerReflectionInfo(ctx.get());
  ServerReflectionRequest req;
  req.set_list_services("");
  REQUIRE(stream->Write(req));
  ServerReflectionResponse resp;
  REQUIRE(stream->Read(&resp));
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) {
    names.push_back(s.name());
  }
  CHECK(std::find(names.begin(), names.end(), "mycel.v1.Node") != names.end());
  CHECK(std::find(names.begin(), names.end(), "grpc.health.v1.Health") !=
        names.end());

  // A client with no .proto files can fetch the Node service's schema.
  req.set_file_containing_symbol("mycel.v1.Node");
  REQUIRE(stream->Write(req));
  REQUIRE(stream->Read(&resp));
  REQUIRE(resp.has_file_descriptor_response());
  google::protobuf::FileDescriptorProto fd;
  REQUIRE(fd.ParseFromString(
      resp.file_descriptor_response().file_descriptor_proto(0)));
  CHECK(fd.name() == "mycel/v1/node.proto");
  REQUIRE(fd.service_size() == 1);
  CHECK(fd.service(0).method(0).name() == "GetInfo");
  stream->WritesDone();
  CHECK(stream->Finish().ok());
}

TEST_CASE("with no daemon the CLI names the address and exits non-zero") {
  TempDir dir;
  auto r = testing::Run({testing::Binary("mycel"), "--socket",
                         dir.Sub("none.sock"), "node", "info"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.rfind("mycel: cannot reach myceld at unix://" +
                        dir.Sub("none.sock") + ": is it running?",
                    0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("usage errors exit 2 and every command has --help") {
  auto mycel = testing::Binary("mycel");
  CHECK(testing::Run({mycel}).exit_code == 2);
  CHECK(testing::Run({mycel, "bogus"}).exit_code == 2);
  CHECK(testing::Run({mycel, "node", "bogus"}).exit_code == 2);
  CHECK(testing::Run({mycel, "-o", "yaml", "node", "info"}).exit_code == 2);
  for (std::vector<std::string> help : {std::vector<std::string>{"--help"},
                                        {"node", "--help"},
                                        {"node", "info", "--help"},
                                        {"node", "health", "--help"},
                                        {"node", "shutdown", "--help"},
                                        {"completion", "bash", "--help"}}) {
    help.insert(help.begin(), mycel);
    auto r = testing::Run(help);
    CHECK_MESSAGE(r.exit_code == 0, help.back());
    CHECK(r.out.find("usage: mycel") == 0);
  }
  auto comp = testing::Run({mycel, "completion", "bash"});
  CHECK(comp.exit_code == 0);
  CHECK(comp.out.find("complete -F _mycel mycel") != std::string::npos);
  // The script is valid bash and completes groups and commands.
  TempDir dir;
  REQUIRE(WriteFile(dir.Sub("c.sh"), comp.out).ok());
  auto words = testing::Run({"/bin/bash", "-c",
                             "source " + dir.Sub("c.sh") +
                                 "; COMP_WORDS=(mycel node sh); COMP_CWORD=2; "
                                 "_mycel; echo ${COMPREPLY[@]}"});
  CHECK_MESSAGE(words.out == "shutdown\n", words.err);
  auto d = testing::Run({testing::Binary("myceld"), "--bogus"});
  CHECK(d.exit_code == 2);
  CHECK(d.err == "myceld: unknown flag --bogus (see --help)\n");
}

// The command lines under "commands:" of a help text: each one's name and
// the column its summary starts at.
std::vector<std::pair<std::string, size_t>> CommandColumns(
    const std::string& help) {
  std::vector<std::pair<std::string, size_t>> out;
  size_t at = help.find("\ncommands:\n");
  if (at == std::string::npos) return out;
  at += strlen("\ncommands:\n");
  while (at < help.size() && help.compare(at, 2, "  ") == 0) {
    const size_t end = help.find('\n', at);
    const std::string line = help.substr(at, end - at);
    const size_t name_end = line.find(' ', 2);
    const size_t summary = line.find_first_not_of(' ', name_end);
    out.emplace_back(line.substr(2, name_end - 2), summary);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

TEST_CASE("every help lists its commands with the summaries in one column") {
  auto mycel = testing::Binary("mycel");
  auto top = testing::Run({mycel, "--help"});
  REQUIRE(top.exit_code == 0);
  std::vector<std::pair<std::string, size_t>> groups = CommandColumns(top.out);
  REQUIRE(groups.size() >= 5);
  std::vector<std::string> helps = {top.out};
  for (const auto& group : groups) {
    auto r = testing::Run({mycel, group.first, "--help"});
    CHECK_MESSAGE(r.exit_code == 0, group.first);
    helps.push_back(r.out);
  }
  int listed = 0;
  for (const std::string& help : helps) {
    std::vector<std::pair<std::string, size_t>> lines = CommandColumns(help);
    for (const auto& line : lines) {
      const std::string& name = line.first;
      const size_t column = line.second;
      ++listed;
      // One space at least between a name and its summary, and the same
      // column for every line of one help ("mycel mesh" has "revocations").
      CHECK_MESSAGE(column > 2 + name.size(), name);
      CHECK_MESSAGE(column == lines.front().second, help);
    }
  }
  CHECK(listed > 20);
}

// `--node` is a global option (a remote node's address) and a flag of
// `mesh revoke` (revoke a node, not a user): after the command's name it
// is the command's.
TEST_CASE("a command's own flag named like a global option is the command's") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  for (std::vector<std::string> args :
       {std::vector<std::string>{"mesh", "revoke", "b", "--node"},
        {"mesh", "revoke", "--node", "b"}}) {
    auto r = d.Cli(args);
    // Reached the daemon, which is in no mesh: not a usage error.
    CHECK_MESSAGE(r.exit_code == 1, r.err);
    CHECK(r.err ==
          "mycel: this node is not in a mesh (mycel mesh init, or "
          "mycel mesh join)\n");
  }
  auto both = d.Cli({"mesh", "revoke", "b", "--node", "--user"});
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("at most one of --node, --user, --serial") !=
        std::string::npos);
  // Before the command it is the global option: the address of a node.
  auto global = testing::Run(
      {testing::Binary("mycel"), "--socket", d.socket(), "--node",
       "127.0.0.1:1", "--tls-ca", dir.Sub("none"), "--tls-cert",
       dir.Sub("none"), "--tls-key", dir.Sub("none"), "mesh", "revoke", "b"});
  CHECK(global.exit_code == 1);
  CHECK_MESSAGE(global.err.find(dir.Sub("none")) != std::string::npos,
                global.err);
}

TEST_CASE("node shutdown stops the daemon gracefully") {
  TempDir dir;
  DaemonProcess d(dir.path());
  REQUIRE(d.Start());
  auto r = d.Cli({"node", "shutdown"});
  CHECK(r.exit_code == 0);
  CHECK(d.Wait() == 0);
  CHECK(d.Log().find("msg=stopping reason=api") != std::string::npos);
  CHECK(d.Log().find("myceld stopped") != std::string::npos);
}

TEST_CASE("on a busy host SIGTERM stops the daemon at once") {
  // myceld compiles its default seccomp profiles on a thread at nice 19,
  // and its exit waits for that thread: with every CPU taken by ordinary
  // work, the compile (tens of milliseconds of CPU) took 4 to 10 s to end,
  // and so did the stop. A stopping daemon now raises the thread back.
  std::atomic<bool> busy{true};
  std::vector<std::thread> hogs;
  const unsigned cpus = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < 2 * cpus; ++i) {
    hogs.emplace_back([&] {
      volatile uint64_t x = 0;
      while (busy.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  TempDir dir;
  DaemonProcess d(dir.path());
  const bool started = d.Start();
  const absl::Time stop = absl::Now();
  const int code = started ? d.Signal(SIGTERM) : -1;
  const absl::Duration took = absl::Now() - stop;
  busy = false;
  for (std::thread& t : hogs) t.join();
  REQUIRE(started);
  CHECK(code == 0);
  MESSAGE("stopped in ", absl::FormatDuration(took));
  CHECK(took < absl::Seconds(3));
}

TEST_CASE("a second daemon on the same state dir or socket is refused") {
  TempDir dir;
  DaemonProcess first(dir.path());
  REQUIRE(first.Start());
  // Same state dir and socket.
  DaemonProcess same(dir.path());
  CHECK_FALSE(same.Start());
  CHECK(first.Log().find(absl::StrCat("another myceld is running: pid ",
                                      first.pid())) != std::string::npos);
  // Another state dir, same socket.
  TempDir other;
  auto r = testing::Run({testing::Binary("myceld"), "--state-dir",
                         other.Sub("state"), "--socket", first.socket()});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(absl::StrCat("another myceld is running: pid ",
                                first.pid())) != std::string::npos);
  // The first one is unharmed.
  CHECK(first.Cli({"node", "health"}).exit_code == 0);
}

TEST_CASE("a stale socket left by a killed daemon is removed at start") {
  TempDir dir;
  {
    DaemonProcess d(dir.path());
    REQUIRE(d.Start());
    CHECK(d.Signal(SIGKILL) == 128 + SIGKILL);
  }
  struct stat sb;
  REQUIRE(lstat((dir.path() + "/mycel.sock").c_str(), &sb) ==
          0);  // left behind
  DaemonProcess again(dir.path());
  REQUIRE(again.Start());
  CHECK(again.Log().find("removed stale socket") != std::string::npos);
  CHECK(again.Cli({"node", "health"}).exit_code == 0);
}

TEST_CASE("a state database from a newer myceld is refused, naming versions") {
  TempDir dir;
  {
    DaemonProcess d(dir.path());
    REQUIRE(d.Start());
    CHECK(d.Signal(SIGTERM) == 0);
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dir.path() + "/state/mycel.db").c_str(), &db) ==
          SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "PRAGMA user_version=999", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(db);
  DaemonProcess d(dir.path());
  CHECK_FALSE(d.Start());
  CHECK(
      d.Log().find("schema version 999 is newer than this myceld supports (") !=
      std::string::npos);
}

TEST_CASE("a corrupt database or an unusable state dir is a clear error") {
  TempDir dir;
  REQUIRE(MakeDirs(dir.path() + "/state", 0700).ok());
  REQUIRE(
      WriteFile(dir.path() + "/state/mycel.db", std::string(4096, 'z')).ok());
  DaemonProcess d(dir.path());
  CHECK_FALSE(d.Start());
  CHECK(d.Log().find("file is not a database") != std::string::npos);
  CHECK(d.Log().find("code=DATA_LOSS") != std::string::npos);

  TempDir file_dir;
  REQUIRE(WriteFile(file_dir.path() + "/state", "not a dir").ok());
  DaemonProcess f(file_dir.path());
  CHECK_FALSE(f.Start());
  CHECK(f.Log().find("state_dir: " + file_dir.path() +
                     "/state exists and is not a directory") !=
        std::string::npos);
}

TEST_CASE("TCP without certificates stays closed and says why") {
  TempDir dir;
  int port = FreePort();
  DaemonProcess d(dir.path(), {"--listen", absl::StrCat("127.0.0.1:", port)});
  REQUIRE(d.Start());
  CHECK(d.Log().find("tcp listener disabled") != std::string::npos);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0);
  close(fd);
  CHECK(d.Cli({"node", "health"}).exit_code == 0);  // the rest runs
}

TEST_CASE("TCP serves mutual TLS: a client certificate is required") {
  TempDir dir;
  std::string pki = dir.Sub("pki");
  auto gen = testing::Run(
      {std::string(MYCEL_SOURCE_DIR) + "/packaging/gen-pki.sh", pki});
  REQUIRE_MESSAGE(gen.exit_code == 0, gen.err);
  int port = FreePort();
  std::string addr = absl::StrCat("127.0.0.1:", port);
  DaemonProcess d(
      dir.path(),
      {"--listen", addr, "--tls-cert", pki + "/server.crt", "--tls-key",
       pki + "/server.key", "--tls-ca", pki + "/ca.crt"});
  REQUIRE(d.Start());
  auto mycel = testing::Binary("mycel");
  auto ok = testing::Run({mycel, "--node", addr, "--tls-ca", pki + "/ca.crt",
                          "--tls-cert", pki + "/client.crt", "--tls-key",
                          pki + "/client.key", "-o", "json", "node", "info"});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("\"name\": \"test-node\"") != std::string::npos);

  // No client certificate: a node that is no authority closes the
  // connection once the handshake ends (docs/security.md).
  grpc::SslCredentialsOptions server_only;
  server_only.pem_root_certs = *ReadFile(pki + "/ca.crt");
  auto stub = mycel::v1::Node::NewStub(
      grpc::CreateChannel(addr, grpc::SslCredentials(server_only)));
  mycel::v1::NodeInfo info;
  grpc::Status st = stub->GetInfo(Call().get(), {}, &info);
  CHECK(st.error_code() == grpc::StatusCode::UNAVAILABLE);

  // Plaintext is not served either.
  auto plain = mycel::v1::Node::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  CHECK_FALSE(plain->GetInfo(Call().get(), {}, &info).ok());

  // Missing TLS flags on the client are a usage error naming the flag.
  auto missing = testing::Run({mycel, "--node", addr, "node", "info"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("--tls-ca") != std::string::npos);
}

TEST_CASE("the daemon reads its settings from a JSON config file") {
  TempDir dir;
  std::string cfg = dir.Sub("myceld.json");
  REQUIRE(
      WriteFile(cfg, R"({"node_name": "from-config", "log_level": "debug"})")
          .ok());
  {
    DaemonProcess d(dir.path(), {"--config", cfg});
    REQUIRE(d.Start());
    auto r = d.Cli({"-o", "json", "node", "info"});
    CHECK(r.out.find("\"name\": \"from-config\"") != std::string::npos);
    CHECK(d.Log().find("level=debug msg=\"host probed\"") != std::string::npos);
    CHECK(d.Signal(SIGTERM) == 0);
  }
  // A flag overrides the file.
  DaemonProcess d(dir.path(), {"--config", cfg, "--node-name", "flag-wins"});
  REQUIRE(d.Start());
  auto r = d.Cli({"-o", "json", "node", "info"});
  CHECK(r.out.find("\"name\": \"flag-wins\"") != std::string::npos);
}

}  // namespace
}  // namespace mycel
