// replication_probe: the client side of tests/bench/replication_bench.sh.
// It talks to many myceld at once, each over its unix socket (one channel
// per node, opened once), so that polling 50 nodes costs no process spawn.
//
//   replication_probe members SOCKETS --want N [--timeout S]
//     Polls Membership.ListMembers on every node until each lists N members
//     ALIVE (itself included). Prints {"members_s":..} (seconds waited);
//     on timeout prints each node's count and exits 1.
//
//   replication_probe converge SOCKETS [--writes W] [--interval-ms MS]
//                     [--prefix P] [--timeout S] [--seed X] [--poll-ms MS]
//     Makes W writes (State.Put of key P<i>, a small JSON value), one every
//     MS ms (200), each on a node picked at random, and measures for each
//     the time from just before its Put is sent until the key is visible on
//     EVERY node. A poller thread sends State.List(P) to all nodes at once
//     (asynchronous calls, then waits for every answer: one "round"), a
//     round at most every --poll-ms (10; 0: back to back); a key counts as
//     visible on a node at the time the answer that first holds it arrived (an
//     upper bound: it was committed before that answer was read, after the
//     request was sent). On the writing node the Put's answer makes it visible.
//     Prints
//     {"writes":W,"nodes":N,"p50_ms":..,"p90_ms":..,"p99_ms":..,
//      "max_ms":..,"min_ms":..,"put_p50_ms":..,"put_p99_ms":..,
//      "poll_round_p50_ms":..,"poll_round_p99_ms":..,"poll_rounds":..,
//      "not_converged":K}
//     (nearest-rank percentiles over the writes). A write not visible
//     everywhere within --timeout (30 s) counts in not_converged and exits 1.
//
//   replication_probe load SOCKETS --rate R --duration S [--prefix P]
//                     [--seed X]
//     Open loop: puts at R per second (scheduled at start + k/R, spread
//     over 32 threads, so that slow answers do not lower the rate offered
//     until 32 are in flight), each on a random node, key P<k>, a 256-byte JSON
//     string value. Counts only puts that returned OK; any other status
//     stops the run with exit 1. Prints {"puts":..,"rate":..,
//     "achieved_per_s":..,"put_p50_ms":..,"put_p99_ms":..,"late_max_ms":..}.
//
// SOCKETS is a file with one unix socket path per line, node 0 first.
// Every error is fatal and printed on stderr: the figures count only
// answers that were OK.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mycel/v1/membership.grpc.pb.h"
#include "mycel/v1/state.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& msg) {
  fprintf(stderr, "replication_probe: %s\n", msg.c_str());
  exit(1);
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double NearestRank(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  long i = static_cast<long>(std::ceil(q * static_cast<double>(v.size())));
  i = std::clamp(i - 1, 0L, static_cast<long>(v.size()) - 1);
  return v[static_cast<size_t>(i)];
}

double R3(double v) { return std::round(v * 1000) / 1000; }

std::chrono::system_clock::time_point Deadline(double s) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<long>(s * 1000));
}

struct Node {
  std::string socket;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<mycel::v1::State::Stub> state;
  std::unique_ptr<mycel::v1::Membership::Stub> members;
};

std::vector<Node> Connect(const std::string& file) {
  std::ifstream in(file);
  if (!in) Die("cannot read " + file);
  std::vector<Node> nodes;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Node n;
    n.socket = line;
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    n.channel = grpc::CreateCustomChannel(
        "unix:" + line, grpc::InsecureChannelCredentials(), args);
    if (!n.channel->WaitForConnected(Deadline(10))) {
      Die("cannot connect to " + line);
    }
    n.state = mycel::v1::State::NewStub(n.channel);
    n.members = mycel::v1::Membership::NewStub(n.channel);
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) Die(file + " names no socket");
  return nodes;
}

struct Flags {
  int want = 0;
  double timeout_s = 30;
  int writes = 50;
  int interval_ms = 200;
  std::string prefix = "replbench/";
  uint64_t seed = 0;
  double rate = 100;
  double duration_s = 30;
  int poll_ms = 10;
};

int Members(std::vector<Node>& nodes, const Flags& f) {
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::milliseconds(static_cast<long>(f.timeout_s * 1000));
  std::vector<int> alive(nodes.size(), 0);
  while (true) {
    bool all = true;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (alive[i] == f.want) continue;
      grpc::ClientContext ctx;
      ctx.set_deadline(Deadline(5));
      mycel::v1::ListMembersResponse resp;
      grpc::Status st = nodes[i].members->ListMembers(
          &ctx, mycel::v1::ListMembersRequest(), &resp);
      if (!st.ok()) {
        Die(absl::StrCat(nodes[i].socket, ": ListMembers: ", st.error_code(),
                         " ", st.error_message()));
      }
      int n = 0;
      for (const auto& m : resp.members()) {
        n += m.state() == mycel::v1::MEMBER_STATE_ALIVE;
      }
      alive[i] = n;
      all &= n == f.want;
    }
    if (all) break;
    if (Clock::now() > end) {
      for (size_t i = 0; i < nodes.size(); ++i) {
        fprintf(stderr, "node %zu (%s): %d alive\n", i, nodes[i].socket.c_str(),
                alive[i]);
      }
      Die(absl::StrCat("not every node saw ", f.want, " alive in ", f.timeout_s,
                       " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  printf("{\"members_s\":%.3f,\"nodes\":%zu,\"alive\":%d}\n",
         Ms(Clock::now() - start) / 1000, nodes.size(), f.want);
  return 0;
}

int Converge(std::vector<Node>& nodes, const Flags& f) {
  const size_t n = nodes.size();
  const int w = f.writes;
  // seen[i][node]: when write i was first seen on node (or max()).
  std::mutex mu;
  std::vector<Clock::time_point> sent(static_cast<size_t>(w));
  std::vector<std::vector<Clock::time_point>> seen(
      static_cast<size_t>(w),
      std::vector<Clock::time_point>(n, Clock::time_point::max()));
  std::vector<int> written_on(static_cast<size_t>(w), -1);
  std::vector<double> put_ms;
  std::vector<double> round_ms;
  std::atomic<bool> stop{false};
  std::map<std::string, int> index;
  for (int i = 0; i < w; ++i) index[absl::StrCat(f.prefix, i)] = i;

  std::thread poller([&] {
    grpc::CompletionQueue cq;
    struct Call {
      grpc::ClientContext ctx;
      mycel::v1::ListStateResponse resp;
      grpc::Status status;
      std::unique_ptr<
          grpc::ClientAsyncResponseReader<mycel::v1::ListStateResponse>>
          reader;
    };
    while (!stop.load()) {
      const auto t0 = Clock::now();
      std::vector<std::unique_ptr<Call>> calls;
      mycel::v1::ListStateRequest req;
      req.set_prefix(f.prefix);
      req.set_page_size(10000);
      for (size_t k = 0; k < n; ++k) {
        auto c = std::make_unique<Call>();
        c->ctx.set_deadline(Deadline(5));
        c->reader = nodes[k].state->AsyncList(&c->ctx, req, &cq);
        c->reader->Finish(&c->resp, &c->status,
                          reinterpret_cast<void*>(static_cast<uintptr_t>(k)));
        calls.push_back(std::move(c));
      }
      for (size_t got = 0; got < n; ++got) {
        void* tag;
        bool ok;
        if (!cq.Next(&tag, &ok)) Die("completion queue shut down");
        const auto t = Clock::now();
        size_t k = reinterpret_cast<uintptr_t>(tag);
        Call& c = *calls[k];
        if (!ok || !c.status.ok()) {
          Die(absl::StrCat(nodes[k].socket, ": List: ", c.status.error_code(),
                           " ", c.status.error_message()));
        }
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& o : c.resp.objects()) {
          auto it = index.find(o.key());
          if (it == index.end()) continue;
          auto& s = seen[static_cast<size_t>(it->second)][k];
          if (t < s) s = t;
        }
      }
      round_ms.push_back(Ms(Clock::now() - t0));
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(f.poll_ms));
    }
    cq.Shutdown();
  });

  std::mt19937_64 rng(f.seed != 0 ? f.seed : std::random_device{}());
  const auto start = Clock::now();
  for (int i = 0; i < w; ++i) {
    std::this_thread::sleep_until(start +
                                  std::chrono::milliseconds(i * f.interval_ms));
    const int node = static_cast<int>(rng() % n);
    mycel::v1::PutStateRequest req;
    req.set_key(absl::StrCat(f.prefix, i));
    req.set_value(absl::StrCat("{\"write\":", i, ",\"node\":", node, "}"));
    mycel::v1::StateObject resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(10));
    const auto t0 = Clock::now();
    grpc::Status st =
        nodes[static_cast<size_t>(node)].state->Put(&ctx, req, &resp);
    const auto t1 = Clock::now();
    if (!st.ok()) {
      stop = true;
      poller.join();
      Die(absl::StrCat(nodes[static_cast<size_t>(node)].socket,
                       ": Put: ", st.error_code(), " ", st.error_message()));
    }
    std::lock_guard<std::mutex> lock(mu);
    sent[static_cast<size_t>(i)] = t0;
    written_on[static_cast<size_t>(i)] = node;
    auto& s = seen[static_cast<size_t>(i)][static_cast<size_t>(node)];
    if (t1 < s) s = t1;
    put_ms.push_back(Ms(t1 - t0));
  }
  // Until every write is everywhere, or the timeout after the last one.
  const auto end = Clock::now() + std::chrono::milliseconds(
                                      static_cast<long>(f.timeout_s * 1000));
  while (Clock::now() < end) {
    bool all = true;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& row : seen) {
        for (auto t : row) all &= t != Clock::time_point::max();
      }
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  poller.join();

  std::vector<double> conv;
  int not_converged = 0;
  for (int i = 0; i < w; ++i) {
    Clock::time_point last = Clock::time_point::min();
    bool all = true;
    int missing = 0;
    for (auto t : seen[static_cast<size_t>(i)]) {
      if (t == Clock::time_point::max()) {
        all = false;
        ++missing;
      } else {
        last = std::max(last, t);
      }
    }
    if (!all) {
      ++not_converged;
      fprintf(stderr,
              "write %d (on node %d): missing on %d nodes after %.0f s\n", i,
              written_on[static_cast<size_t>(i)], missing, f.timeout_s);
      continue;
    }
    conv.push_back(Ms(last - sent[static_cast<size_t>(i)]));
  }
  printf(
      "{\"writes\":%d,\"nodes\":%zu,\"interval_ms\":%d,\"p50_ms\":%g,"
      "\"p90_ms\":%g,\"p99_ms\":%g,\"max_ms\":%g,\"min_ms\":%g,"
      "\"put_p50_ms\":%g,\"put_p99_ms\":%g,\"poll_round_p50_ms\":%g,"
      "\"poll_round_p99_ms\":%g,\"poll_rounds\":%zu,\"poll_ms\":%d,"
      "\"not_converged\":%d}\n",
      w, n, f.interval_ms, R3(NearestRank(conv, 0.5)),
      R3(NearestRank(conv, 0.9)), R3(NearestRank(conv, 0.99)),
      R3(NearestRank(conv, 1)), R3(NearestRank(conv, 0)),
      R3(NearestRank(put_ms, 0.5)), R3(NearestRank(put_ms, 0.99)),
      R3(NearestRank(round_ms, 0.5)), R3(NearestRank(round_ms, 0.99)),
      round_ms.size(), f.poll_ms, not_converged);
  return not_converged == 0 ? 0 : 1;
}

int Load(std::vector<Node>& nodes, const Flags& f) {
  constexpr int kThreads = 32;
  const long total = static_cast<long>(f.rate * f.duration_s);
  const auto start = Clock::now() + std::chrono::milliseconds(10);
  std::mutex mu;
  std::vector<double> put_ms;
  double late_max = 0;
  std::atomic<bool> failed{false};
  std::string error;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng((f.seed != 0 ? f.seed : std::random_device{}()) +
                          static_cast<uint64_t>(t));
      std::string value = "\"";
      while (value.size() < 255) value += static_cast<char>('a' + rng() % 26);
      value += "\"";
      std::vector<double> lat;
      double late = 0;
      for (long k = t; k < total && !failed.load(); k += kThreads) {
        const auto at = start + std::chrono::microseconds(static_cast<long>(
                                    static_cast<double>(k) * 1e6 / f.rate));
        std::this_thread::sleep_until(at);
        const size_t node = rng() % nodes.size();
        mycel::v1::PutStateRequest req;
        req.set_key(absl::StrCat(f.prefix, k));
        req.set_value(value);
        mycel::v1::StateObject resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(Deadline(10));
        const auto t0 = Clock::now();
        late = std::max(late, Ms(t0 - at));
        grpc::Status st = nodes[node].state->Put(&ctx, req, &resp);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (error.empty()) {
            error = absl::StrCat(nodes[node].socket, ": Put: ", st.error_code(),
                                 " ", st.error_message());
          }
          failed = true;
          return;
        }
        lat.push_back(Ms(Clock::now() - t0));
      }
      std::lock_guard<std::mutex> lock(mu);
      put_ms.insert(put_ms.end(), lat.begin(), lat.end());
      late_max = std::max(late_max, late);
    });
  }
  for (auto& t : threads) t.join();
  if (failed) Die(error);
  const double took = Ms(Clock::now() - start) / 1000;
  printf(
      "{\"puts\":%zu,\"rate\":%g,\"duration_s\":%g,\"achieved_per_s\":%.1f,"
      "\"put_p50_ms\":%g,\"put_p99_ms\":%g,\"late_max_ms\":%g}\n",
      put_ms.size(), f.rate, f.duration_s,
      static_cast<double>(put_ms.size()) / took, R3(NearestRank(put_ms, 0.5)),
      R3(NearestRank(put_ms, 0.99)), R3(late_max));
  return 0;
}

[[noreturn]] void Usage() {
  fprintf(stderr,
          "usage: replication_probe members SOCKETS --want N [--timeout S]\n"
          "       replication_probe converge SOCKETS [--writes W] "
          "[--interval-ms MS]\n"
          "                         [--prefix P] [--timeout S] [--seed X] "
          "[--poll-ms MS]\n"
          "       replication_probe load SOCKETS --rate R --duration S "
          "[--prefix P] [--seed X]\n");
  exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) Usage();
  const std::string mode = argv[1];
  Flags f;
  for (int i = 3; i < argc; i += 2) {
    if (i + 1 >= argc) Usage();
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    bool ok = false;
    if (flag == "--want") ok = absl::SimpleAtoi(v, &f.want) && f.want > 0;
    if (flag == "--timeout") ok = absl::SimpleAtod(v, &f.timeout_s);
    if (flag == "--writes") ok = absl::SimpleAtoi(v, &f.writes) && f.writes > 0;
    if (flag == "--interval-ms") ok = absl::SimpleAtoi(v, &f.interval_ms);
    if (flag == "--prefix") {
      f.prefix = v;
      ok = !f.prefix.empty();
    }
    if (flag == "--poll-ms")
      ok = absl::SimpleAtoi(v, &f.poll_ms) && f.poll_ms >= 0;
    if (flag == "--seed") ok = absl::SimpleAtoi(v, &f.seed);
    if (flag == "--rate") ok = absl::SimpleAtod(v, &f.rate) && f.rate > 0;
    if (flag == "--duration") {
      ok = absl::SimpleAtod(v, &f.duration_s) && f.duration_s > 0;
    }
    if (!ok) Usage();
  }
  std::vector<Node> nodes = Connect(argv[2]);
  if (mode == "members") {
    if (f.want == 0) Usage();
    return Members(nodes, f);
  }
  if (mode == "converge") return Converge(nodes, f);
  if (mode == "load") return Load(nodes, f);
  Usage();
}
