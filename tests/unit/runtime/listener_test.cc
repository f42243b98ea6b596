#include "runtime/listener.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/source_address.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

// A Listener on `listen` (127.0.0.1:0 unless said) with its own event loop
// thread; keeps what it hands over.
class TcpListenerFixture {
 public:
  explicit TcpListenerFixture(Listener::Options options,
                              const char* listen = "127.0.0.1:0")
      : work_(io_.get_executor()) {
    absl::StatusOr<ListeningSocket> socket = ListenTcp(listen);
    REQUIRE(socket.ok());
    options.name = "tcp";
    options.on_connection = [this](UniqueFd fd) {
      absl::MutexLock l(&mu_);
      handed_.push_back(std::move(fd));
    };
    listener_ = std::make_unique<Listener>(&io_, *std::move(socket), options);
    port_ = listener_->port();
    thread_ = std::thread([this] { io_.run(); });
    listener_->Start();
  }
  ~TcpListenerFixture() {
    listener_->Close();
    work_.reset();
    io_.stop();
    thread_.join();
  }

  // A connected client socket (the kernel completes the handshake whether
  // or not the listener keeps the connection).
  // `from` picks the source address (any of 127.0.0.0/8 is this host's; an
  // IPv6 one connects to ::1, unless `to` names another).
  UniqueFd Connect(const char* from = nullptr, const char* to = nullptr) const {
    in6_addr from6{};
    const bool v6 = from != nullptr && inet_pton(AF_INET6, from, &from6) == 1;
    UniqueFd fd(socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (v6) {
      sockaddr_in6 src{};
      src.sin6_family = AF_INET6;
      src.sin6_addr = from6;
      REQUIRE(bind(fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof(src)) ==
              0);
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_port = htons(static_cast<uint16_t>(port_));
      REQUIRE(inet_pton(AF_INET6, to != nullptr ? to : "::1",
                        &addr.sin6_addr) == 1);
      REQUIRE(connect(fd.get(), reinterpret_cast<sockaddr*>(&addr),
                      sizeof(addr)) == 0);
      return fd;
    }
    if (from != nullptr) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      REQUIRE(inet_pton(AF_INET, from, &src.sin_addr) == 1);
      REQUIRE(bind(fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof(src)) ==
              0);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd.get(), reinterpret_cast<sockaddr*>(&addr),
                    sizeof(addr)) == 0);
    return fd;
  }

  // Waits until the listener has dealt with `n` connections.
  void WaitHandled(uint64_t n) const {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      const Listener::Stats s = listener_->stats();
      if (s.accepted + s.refused_rate + s.refused_open + s.refused_banned >=
          n) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    FAIL("the listener did not handle ", n, " connections in 5 s");
  }

  std::vector<int> Handed() {
    absl::MutexLock l(&mu_);
    std::vector<int> fds;
    for (const UniqueFd& fd : handed_) fds.push_back(fd.get());
    return fds;
  }
  // Closes the i-th connection handed over; `shut_down` first, as gRPC
  // does when it is done with a connection.
  void CloseHanded(size_t i, bool shut_down = false) {
    absl::MutexLock l(&mu_);
    REQUIRE(i < handed_.size());
    if (shut_down) shutdown(handed_[i].get(), SHUT_RDWR);
    handed_[i] = UniqueFd();
  }
  Listener::Stats stats() const { return listener_->stats(); }
  // Listener::ShutdownWindowConnections, on the listener's thread.
  size_t ShutdownWindow(absl::Duration ban_sources = absl::ZeroDuration()) {
    std::promise<size_t> done;
    boost::asio::post(io_, [&] {
      done.set_value(listener_->ShutdownWindowConnections(ban_sources));
    });
    return done.get_future().get();
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work_;
  std::unique_ptr<Listener> listener_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<UniqueFd> handed_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("an accepted TCP connection has Nagle's algorithm off") {
  // Without TCP_NODELAY each small TLS handshake record waited for the
  // peer's delayed ACK: a new mTLS connection took about 50 ms, not 7.
  TcpListenerFixture f(Listener::Options{});
  UniqueFd client = f.Connect();
  f.WaitHandled(1);
  std::vector<int> handed = f.Handed();
  REQUIRE(handed.size() == 1);
  int on = 0;
  socklen_t len = sizeof(on);
  REQUIRE(getsockopt(handed[0], IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0);
  CHECK(on != 0);
}

TEST_CASE("a source over its burst is refused; the connections are closed") {
  Listener::Options o;
  o.per_source_burst = 3;
  TcpListenerFixture f(o);
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(f.Connect());
  f.WaitHandled(5);
  const Listener::Stats s = f.stats();
  CHECK(s.accepted == 3);
  CHECK(s.refused_rate == 2);
  CHECK(f.Handed().size() == 3);
  // The refused ones were closed by the listener: their reads see EOF.
  int eof = 0;
  for (UniqueFd& c : clients) {
    timeval tv{0, 200 * 1000};
    setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b;
    if (read(c.get(), &b, 1) == 0) ++eof;
  }
  CHECK(eof == 2);
}

TEST_CASE("the default burst admits a 50-node mesh's joins from one host") {
  // Every node of a mesh on one host (or behind one NAT) connects from the
  // same address, about twice when it joins.
  TcpListenerFixture f(Listener::Options{});
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 2 * 50; ++i) clients.push_back(f.Connect());
  f.WaitHandled(100);
  CHECK(f.stats().accepted == 100);
  CHECK(f.stats().refused_rate == 0);
}

// Whether the peer closed `c`: a read sees EOF within 200 ms.
bool SeesEof(const UniqueFd& c) {
  timeval tv{0, 200 * 1000};
  setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char b;
  return read(c.get(), &b, 1) == 0;
}

TEST_CASE("a source holding its cap of open connections is refused more") {
  // A client that completes its handshake and then holds the connection
  // is not refused by the burst once its window has passed: without a cap
  // on what it holds, it took every descriptor of the daemon in minutes.
  Listener::Options o;
  o.per_source_open = 3;
  TcpListenerFixture f(o);
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(f.Connect());
  f.WaitHandled(5);
  CHECK(f.stats().accepted == 3);
  CHECK(f.stats().refused_open == 2);
  int eof = 0;
  for (UniqueFd& c : clients) eof += SeesEof(c) ? 1 : 0;
  CHECK(eof == 2);

  SUBCASE("another source is not held back") {
    UniqueFd other = f.Connect("127.0.0.2");
    f.WaitHandled(6);
    CHECK(f.stats().accepted == 4);
    CHECK_FALSE(SeesEof(other));
  }
  SUBCASE("a connection closed by its owner frees its place") {
    f.CloseHanded(0);
    // The closed descriptor's number is taken again at once by a socket
    // that is not the connection: it must not count as the connection.
    UniqueFd reuse(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    UniqueFd again = f.Connect();
    f.WaitHandled(6);
    CHECK(f.stats().accepted == 4);
    CHECK_FALSE(SeesEof(again));
    UniqueFd over = f.Connect();
    f.WaitHandled(7);
    CHECK(f.stats().refused_open == 3);
    CHECK(SeesEof(over));
  }
}

TEST_CASE("the default cap of open connections holds a 50-node mesh") {
  // About two connections each from 49 peers sharing one address.
  TcpListenerFixture f(Listener::Options{});
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 2 * 50; ++i) clients.push_back(f.Connect());
  f.WaitHandled(100);
  CHECK(f.stats().accepted == 100);
  CHECK(f.stats().refused_open == 0);
}

TEST_CASE("a source is an IPv4 address or an IPv6 /64, from gRPC's peer") {
  // gRPC 1.51 percent-encodes the brackets of an IPv6 peer.
  CHECK(SourceBlockOfPeer("ipv4:192.0.2.7:4711") == "192.0.2.7");
  CHECK(SourceBlockOfPeer("ipv6:%5B2001:db8:1:2:aa::1%5D:4711") ==
        "2001:db8:1:2::/64");
  CHECK(SourceBlockOfPeer("ipv6:%5B2001:db8:1:2:ffff::9%5D:1") ==
        "2001:db8:1:2::/64");
  CHECK(SourceBlockOfPeer("ipv6:[2001:db8:1:3::1]:4711") ==
        "2001:db8:1:3::/64");
  CHECK(SourceBlockOfPeer("ipv6:%5B::1%5D:4711") == "::/64");
  CHECK(SourceBlockOfPeer("ipv6:%5B::ffff:192.0.2.7%5D:4711") == "192.0.2.7");
  CHECK(SourceBlockOfPeer("ipv6:%5Bfe80::1%25eth0%5D:4711") == "fe80::/64");
  CHECK(PeerHost("ipv4:192.0.2.7:4711") == "192.0.2.7");
  CHECK(PeerHost("ipv6:%5B2001:db8::1%5D:4711") == "[2001:db8::1]");
  // Anything else is its own source, whole.
  for (const char* other :
       {"unix:/run/mycel/mycel.sock", "ipv6:%5Bnot-an-address%5D:1",
        "ipv4:300.1.1.1:2", "ipv4:nocolon", "", "ipv6:%5"}) {
    CAPTURE(other);
    CHECK(SourceBlockOfPeer(other) == other);
  }
  CHECK(PeerHost("unix:/run/mycel/mycel.sock") == "unix:/run/mycel/mycel.sock");

  sockaddr_storage ss{};
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  a6->sin6_family = AF_INET6;
  REQUIRE(inet_pton(AF_INET6, "2001:db8:1:2:3:4:5:6", &a6->sin6_addr) == 1);
  CHECK(SourceBlock(ss) == "2001:db8:1:2::/64");
  REQUIRE(inet_pton(AF_INET6, "::ffff:10.1.2.3", &a6->sin6_addr) == 1);
  CHECK(SourceBlock(ss) == "10.1.2.3");
  ss = sockaddr_storage{};
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  a4->sin_family = AF_INET;
  REQUIRE(inet_pton(AF_INET, "10.1.2.3", &a4->sin_addr) == 1);
  CHECK(SourceBlock(ss) == "10.1.2.3");
  ss.ss_family = AF_UNIX;
  CHECK(SourceBlock(ss).empty());
}

// Moves the calling thread into a network namespace of its own for its
// lifetime, with lo up and `addresses` (IPv6, /64) on it, and back after.
// Threads it starts are in the namespace too.
class PrivateNetwork {
 public:
  explicit PrivateNetwork(const std::vector<std::string>& addresses) {
    if (geteuid() != 0) {
      why_ = "needs root (a network namespace with IPv6 addresses)";
      return;
    }
    home_ = UniqueFd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    REQUIRE(home_.valid());
    if (unshare(CLONE_NEWNET) != 0) {
      why_ =
          std::string("unshare(CLONE_NEWNET) fails here: ") + strerror(errno);
      home_ = UniqueFd();
      return;
    }
    if (access("/proc/sys/net/ipv6", F_OK) != 0) {
      why_ = "this kernel has no IPv6";
      return;
    }
    // A child forked from this thread is in its namespace.
    std::string script = "ip link set lo up";
    for (const std::string& a : addresses) {
      script += " && ip -6 addr add " + a + "/64 dev lo nodad";
    }
    REQUIRE_MESSAGE(system(script.c_str()) == 0, script);
  }
  ~PrivateNetwork() {
    if (home_.valid()) CHECK(setns(home_.get(), CLONE_NEWNET) == 0);
  }
  // Why the namespace could not be made; empty when it was.
  const std::string& why() const { return why_; }

 private:
  UniqueFd home_;
  std::string why_;
};

TEST_CASE(
    "an IPv6 source is its /64; a dual-stack listener's IPv4 clients "
    "are their own addresses") {
  // Any holder of an IPv6 /64 can bind 2^64 addresses: limits kept per
  // address gave it as many fresh budgets as it liked.
  PrivateNetwork net({"fd00:6d79:6365:6c00::1", "fd00:6d79:6365:6c00::2",
                      "fd00:6d79:6365:6c00::3", "fd00:6d79:6365:6c01::1"});
  if (!net.why().empty()) {
    MESSAGE("skipped: ", net.why());
    return;
  }
  Listener::Options o;
  o.per_source_open = 2;
  TcpListenerFixture f(o, "[::]:0");
  const char* to = "fd00:6d79:6365:6c00::1";
  UniqueFd a = f.Connect("fd00:6d79:6365:6c00::2", to);
  UniqueFd b = f.Connect("fd00:6d79:6365:6c00::3", to);
  UniqueFd c = f.Connect("fd00:6d79:6365:6c00::2", to);
  f.WaitHandled(3);
  CHECK(f.stats().accepted == 2);
  CHECK(f.stats().refused_open == 1);
  CHECK(SeesEof(c));
  // Another /64 has its own cap.
  UniqueFd d = f.Connect("fd00:6d79:6365:6c01::1", to);
  f.WaitHandled(4);
  CHECK(f.stats().accepted == 3);
  CHECK_FALSE(SeesEof(d));
  // IPv4 clients arrive as ::ffff:a.b.c.d, whose first 64 bits are zero
  // for every one of them: each is its IPv4 address, not that /64.
  UniqueFd e1 = f.Connect("127.0.0.1");
  UniqueFd e2 = f.Connect("127.0.0.1");
  UniqueFd e3 = f.Connect("127.0.0.2");
  f.WaitHandled(7);
  CHECK(f.stats().accepted == 6);
  CHECK(f.stats().refused_open == 1);
  UniqueFd e4 = f.Connect("127.0.0.1");
  f.WaitHandled(8);
  CHECK(f.stats().refused_open == 2);
  CHECK(SeesEof(e4));
}

TEST_CASE("connections taken while the window is open are shut down after") {
  // The daemon takes clients without a certificate only while it serves
  // joins; one that connected then must not keep its connection.
  std::atomic<bool> open{true};
  Listener::Options o;
  o.window = [&] { return open.load(); };
  o.window_check = absl::Milliseconds(50);
  TcpListenerFixture f(o);
  UniqueFd during = f.Connect();
  f.WaitHandled(1);
  CHECK_FALSE(SeesEof(during));  // held while the window is open
  open = false;
  UniqueFd after = f.Connect();
  f.WaitHandled(2);
  bool shut = false;
  for (int i = 0; i < 10 && !shut; ++i) shut = SeesEof(during);
  CHECK(shut);
  CHECK(f.stats().closed_after_window == 1);
  CHECK_FALSE(SeesEof(after));
}

TEST_CASE("a window connection its owner closed is only forgotten") {
  std::atomic<bool> open{true};
  Listener::Options o;
  o.window = [&] { return open.load(); };
  o.window_check = absl::Milliseconds(50);
  TcpListenerFixture f(o);
  UniqueFd first = f.Connect();
  UniqueFd second = f.Connect();
  f.WaitHandled(2);
  // gRPC shuts a connection down, then closes it: the listener's duplicate
  // no longer keeps the socket, and is dropped at the next check.
  f.CloseHanded(0, /*shut_down=*/true);
  CHECK(SeesEof(first));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  open = false;
  bool shut = false;
  for (int i = 0; i < 10 && !shut; ++i) shut = SeesEof(second);
  CHECK(shut);
  CHECK(f.stats().closed_after_window == 1);  // the second only
}

TEST_CASE("a connection accepted just before the window opens is kept too") {
  // Its handshake may finish inside the window (the server allows 10 s),
  // and so take what the window gives: it is kept as if taken in it, and
  // shut down when the window closes. One accepted longer before is not.
  std::atomic<bool> open{false};
  Listener::Options o;
  o.window = [&] { return open.load(); };
  o.window_check = absl::Milliseconds(50);
  o.window_lookback = absl::Seconds(2);
  TcpListenerFixture f(o);
  UniqueFd old = f.Connect();
  f.WaitHandled(1);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  UniqueFd recent = f.Connect();
  f.WaitHandled(2);
  open = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(SeesEof(recent));
  open = false;
  bool shut = false;
  for (int i = 0; i < 10 && !shut; ++i) shut = SeesEof(recent);
  CHECK(shut);
  CHECK(f.stats().closed_after_window == 1);
  CHECK_FALSE(SeesEof(old));
}

TEST_CASE("a flood without a certificate shuts the window's connections only") {
  // The daemon's answer to calls flooded by a client without a
  // certificate: such a client can only hold a connection taken in the
  // window, and the members connected before keep theirs.
  std::atomic<bool> open{false};
  Listener::Options o;
  o.window = [&] { return open.load(); };
  o.window_check = absl::Milliseconds(50);
  o.window_lookback = absl::ZeroDuration();
  TcpListenerFixture f(o);
  UniqueFd before = f.Connect();
  f.WaitHandled(1);
  open = true;
  UniqueFd during = f.Connect();
  f.WaitHandled(2);
  CHECK(f.ShutdownWindow() == 1);
  CHECK(SeesEof(during));
  CHECK_FALSE(SeesEof(before));
  // The window is still open: the next one is taken, and kept.
  UniqueFd next = f.Connect();
  f.WaitHandled(3);
  CHECK_FALSE(SeesEof(next));
  CHECK(f.ShutdownWindow() == 1);
  CHECK(SeesEof(next));
}

TEST_CASE(
    "a flood's sources are refused while the window is open, for the "
    "ban; other sources are not") {
  // Banning every client without a certificate after one flood kept every
  // joiner out for the ban, and a flooder could renew it at will.
  std::atomic<bool> open{true};
  Listener::Options o;
  o.window = [&] { return open.load(); };
  o.window_check = absl::Milliseconds(50);
  o.window_lookback = absl::ZeroDuration();
  TcpListenerFixture f(o);
  UniqueFd flooder = f.Connect("127.0.0.3");
  f.WaitHandled(1);
  CHECK(f.ShutdownWindow(absl::Seconds(1)) == 1);
  CHECK(SeesEof(flooder));
  UniqueFd again = f.Connect("127.0.0.3");
  f.WaitHandled(2);
  CHECK(f.stats().refused_banned == 1);
  CHECK(SeesEof(again));
  UniqueFd other = f.Connect("127.0.0.4");
  f.WaitHandled(3);
  CHECK(f.stats().accepted == 2);
  CHECK_FALSE(SeesEof(other));
  // With the window closed a client needs a certificate: the source may
  // connect (a member behind the flooder's address, say).
  open = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  UniqueFd member = f.Connect("127.0.0.3");
  f.WaitHandled(4);
  CHECK(f.stats().accepted == 3);
  CHECK_FALSE(SeesEof(member));
  // The ban ends.
  open = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  UniqueFd later = f.Connect("127.0.0.3");
  f.WaitHandled(5);
  CHECK(f.stats().accepted == 4);
  CHECK(f.stats().refused_banned == 1);
  CHECK_FALSE(SeesEof(later));
}

}  // namespace
}  // namespace mycel
