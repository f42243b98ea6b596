// state_put_bench: what --durability costs a client's State.Put, and a
// closed-loop load generator for tests/bench/etcd_bench.sh.
//
//   state_put_bench [--puts N] [--dir DIR]
//
// Starts myceld twice on a fresh state directory under DIR (default /tmp;
// put it on the disk whose cost you want), with --durability normal and
// then full, and makes N sequential Puts of a 100-byte JSON value over the
// unix socket, each waiting for its answer (one client: latency, not
// throughput). Prints median, p90 and p99 per mode and the ratio of the
// medians.
//
//   state_put_bench --socket PATH [--clients C] [--conns K] [--duration S]
//                   [--warmup S] [--value-size B] [--timeout S]
//                   [--api callback|sync]
//
// Load mode, against a myceld already running on PATH (etcd_bench.sh
// starts it): the shape of etcdload (tests/bench/etcd/main.go). C clients,
// each a closed loop of State.Put (send, wait for the answer, send the
// next), each with its own gRPC channel and connection (--conns K shares K
// channels round-robin). With --api callback (the default) the clients'
// loops run on gRPC's few callback threads, as etcdload's goroutines run on
// Go's; with --api sync each client is a thread blocked in a synchronous
// call (the load generator before 2026-12-05, which spends more of the
// shared CPUs on itself). Keys are distinct, bench/<client>/<seq>, values that
// are a JSON string of exactly B bytes (default 256: quotes included,
// random alphanumerics inside). Puts that complete in the first --warmup
// (1 s) are not counted; the window is --duration (10 s) after it. Only
// puts that returned OK are counted; any other status stops the run: exit
// status 1, the error on stderr, and a JSON line with "failed":true,
// "errors", "first_error" and "ops_ok_before_error" instead of figures.
// Otherwise prints etcdload's JSON line:
//   {"mode":"put","clients":C,"conns":K,"value_size":B,"duration_s":S,
//    "ops":N,"ops_per_s":..,"p50_ms":..,"p90_ms":..,"p99_ms":..,
//    "max_ms":..,"errors":0}
// with nearest-rank percentiles over every measured put.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "mycel/v1/state.grpc.pb.h"
#include "tests/testing/process.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double p50_us = 0;
  double p90_us = 0;
  double p99_us = 0;
};

bool MeasureIn(const std::string& path, const char* durability, int puts,
               Figures* out);

double At(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

bool Measure(const std::string& base, const char* durability, int puts,
             Figures* out) {
  std::string tmpl = base + "/state-put-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    perror(tmpl.c_str());
    return false;
  }
  const std::string path = tmpl;
  bool ok = MeasureIn(path, durability, puts, out);
  mycel::testing::Run({"/bin/rm", "-rf", path});
  return ok;
}

bool MeasureIn(const std::string& path, const char* durability, int puts,
               Figures* out) {
  mycel::testing::DaemonProcess d(path, {"--durability", durability});
  if (!d.Start()) {
    fprintf(stderr, "myceld --durability %s did not start:\n%s\n", durability,
            d.Log().c_str());
    return false;
  }
  auto stub = mycel::v1::State::NewStub(grpc::CreateChannel(
      "unix:" + d.socket(), grpc::InsecureChannelCredentials()));
  const std::string value =
      absl::StrCat("{\"payload\": \"", std::string(84, 'x'), "\"}");
  std::vector<double> us;
  for (int i = 0; i < puts + 20; ++i) {
    mycel::v1::PutStateRequest req;
    req.set_key(absl::StrCat("bench/", i % 1000));
    req.set_value(value);
    mycel::v1::StateObject resp;
    grpc::ClientContext ctx;
    auto t0 = Clock::now();
    grpc::Status st = stub->Put(&ctx, req, &resp);
    auto t1 = Clock::now();
    if (!st.ok()) {
      fprintf(stderr, "Put: %s\n", st.error_message().c_str());
      return false;
    }
    // The first calls warm the channel and the statement cache.
    if (i >= 20) {
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  out->p50_us = At(us, 0.5);
  out->p90_us = At(us, 0.9);
  out->p99_us = At(us, 0.99);
  d.Signal(SIGTERM);
  return true;
}

struct LoadOptions {
  std::string socket;
  int clients = 1;
  int conns = 0;
  double duration_s = 10;
  double warmup_s = 1;
  int value_size = 256;
  double timeout_s = 10;
  // gRPC's callback API (a few threads for all clients) instead of a
  // thread per client blocked in a synchronous call.
  bool callback = true;
};

// Nearest rank, as etcdload: the ceil(q*n)-th smallest.
double NearestRank(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  long i = static_cast<long>(std::ceil(q * static_cast<double>(sorted.size())));
  i = std::clamp(i - 1, 0L, static_cast<long>(sorted.size()) - 1);
  return sorted[static_cast<size_t>(i)];
}

int RunLoad(const LoadOptions& o) {
  const int nconn = o.conns <= 0 || o.conns > o.clients ? o.clients : o.conns;
  std::vector<std::unique_ptr<mycel::v1::State::Stub>> stubs;
  for (int i = 0; i < nconn; ++i) {
    grpc::ChannelArguments args;
    // Channels with equal arguments share one connection (gRPC's global
    // subchannel pool): each gets its own, as each etcdload client does.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(
        "unix:" + o.socket, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::seconds(5))) {
      fprintf(stderr, "state_put_bench: connection %d to %s failed\n", i,
              o.socket.c_str());
      return 1;
    }
    stubs.push_back(mycel::v1::State::NewStub(channel));
  }
  const auto start = Clock::now();
  const auto measure_from =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(o.warmup_s));
  const auto end =
      measure_from + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(o.duration_s));
  std::mutex mu;
  std::vector<double> all_ms;
  std::atomic<bool> failed{false};
  std::atomic<long> ok_total{0};
  int errors = 0;
  std::string first_error;
  // One client: a closed loop of puts, one in flight. Begin makes the next
  // request (false when the window is over); End takes its answer.
  struct Client {
    int id = 0;
    mycel::v1::State::Stub* stub = nullptr;
    std::string value;
    long seq = 0;
    std::vector<double> lat;
    mycel::v1::PutStateRequest req;
    mycel::v1::StateObject resp;
    std::unique_ptr<grpc::ClientContext> ctx;
    Clock::time_point sent;
  };
  std::vector<Client> clients(static_cast<size_t>(o.clients));
  for (int id = 0; id < o.clients; ++id) {
    Client& c = clients[static_cast<size_t>(id)];
    c.id = id;
    c.stub = stubs[static_cast<size_t>(id % nconn)].get();
    static constexpr char kAlnum[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::mt19937_64 rng(std::random_device{}() + static_cast<unsigned>(id));
    c.value = "\"";
    for (int i = 0; i + 2 < o.value_size; ++i) {
      c.value += kAlnum[rng() % (sizeof(kAlnum) - 1)];
    }
    c.value += "\"";
    c.lat.reserve(4096);
  }
  auto begin = [&](Client& c) {
    c.sent = Clock::now();
    if (c.sent > end || failed.load(std::memory_order_relaxed)) return false;
    char key[64];
    snprintf(key, sizeof(key), "bench/%04d/%010ld", c.id, c.seq++);
    c.req.set_key(key);
    c.req.set_value(c.value);
    c.resp.Clear();
    c.ctx = std::make_unique<grpc::ClientContext>();
    c.ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::duration<double>(o.timeout_s)));
    return true;
  };
  // False when the client stops (an error).
  auto finish = [&](Client& c, const grpc::Status& st) {
    auto done = Clock::now();
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      ++errors;
      if (first_error.empty()) {
        first_error =
            absl::StrCat("client ", c.id, " put ", c.req.key(), ": code ",
                         st.error_code(), ": ", st.error_message());
      }
      failed = true;
      return false;
    }
    ok_total.fetch_add(1, std::memory_order_relaxed);
    if (c.sent >= measure_from && done <= end) {
      c.lat.push_back(
          std::chrono::duration<double, std::milli>(done - c.sent).count());
    }
    return true;
  };
  if (o.callback) {
    // gRPC's callback API: every client's loop runs on gRPC's own few
    // threads, as etcdload's goroutines run on Go's.
    std::atomic<int> running{o.clients};
    std::mutex done_mu;
    std::condition_variable done_cv;
    std::function<void(Client&)> next = [&](Client& c) {
      if (!begin(c)) {
        if (running.fetch_sub(1) == 1) {
          std::lock_guard<std::mutex> lock(done_mu);
          done_cv.notify_all();
        }
        return;
      }
      c.stub->async()->Put(c.ctx.get(), &c.req, &c.resp,
                           [&, cp = &c](grpc::Status st) {
                             if (!finish(*cp, st)) {
                               if (running.fetch_sub(1) == 1) {
                                 std::lock_guard<std::mutex> lock(done_mu);
                                 done_cv.notify_all();
                               }
                               return;
                             }
                             next(*cp);
                           });
    };
    for (Client& c : clients) next(c);
    std::unique_lock<std::mutex> lock(done_mu);
    done_cv.wait(lock, [&] { return running.load() == 0; });
  } else {
    std::vector<std::thread> threads;
    for (Client& c : clients) {
      threads.emplace_back([&, cp = &c] {
        while (begin(*cp)) {
          grpc::Status st = cp->stub->Put(cp->ctx.get(), cp->req, &cp->resp);
          if (!finish(*cp, st)) break;
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  for (Client& c : clients) {
    all_ms.insert(all_ms.end(), c.lat.begin(), c.lat.end());
  }
  if (failed) {
    // No figures from a run that met an error: the row is a failure, said
    // on stderr and in the JSON line, and the exit status is 1.
    fprintf(stderr, "state_put_bench: %s\n", first_error.c_str());
    std::string escaped;
    for (char ch : first_error) {
      if (ch == '"' || ch == '\\') escaped += '\\';
      escaped += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
    }
    printf(
        "{\"mode\":\"put\",\"clients\":%d,\"conns\":%d,\"value_size\":%d,"
        "\"duration_s\":%g,\"failed\":true,\"ops_ok_before_error\":%ld,"
        "\"errors\":%d,\"first_error\":\"%s\"}\n",
        o.clients, nconn, o.value_size, o.duration_s, ok_total.load(), errors,
        escaped.c_str());
    return 1;
  }
  std::sort(all_ms.begin(), all_ms.end());
  auto r3 = [](double v) { return std::round(v * 1000) / 1000; };
  printf(
      "{\"mode\":\"put\",\"clients\":%d,\"conns\":%d,\"value_size\":%d,"
      "\"duration_s\":%g,\"ops\":%zu,\"ops_per_s\":%.1f,\"p50_ms\":%g,"
      "\"p90_ms\":%g,\"p99_ms\":%g,\"max_ms\":%g,\"errors\":0}\n",
      o.clients, nconn, o.value_size, o.duration_s, all_ms.size(),
      static_cast<double>(all_ms.size()) / o.duration_s,
      r3(NearestRank(all_ms, 0.5)), r3(NearestRank(all_ms, 0.9)),
      r3(NearestRank(all_ms, 0.99)), r3(NearestRank(all_ms, 1)));
  return 0;
}

bool ParseLoadFlag(const std::string& flag, const char* v, LoadOptions* o) {
  if (flag == "--socket") {
    o->socket = v;
    return true;
  }
  if (flag == "--clients")
    return absl::SimpleAtoi(v, &o->clients) && o->clients > 0;
  if (flag == "--conns") return absl::SimpleAtoi(v, &o->conns) && o->conns >= 0;
  if (flag == "--duration") {
    return absl::SimpleAtod(v, &o->duration_s) && o->duration_s > 0;
  }
  if (flag == "--warmup") {
    return absl::SimpleAtod(v, &o->warmup_s) && o->warmup_s >= 0;
  }
  if (flag == "--value-size") {
    return absl::SimpleAtoi(v, &o->value_size) && o->value_size >= 2;
  }
  if (flag == "--timeout") {
    return absl::SimpleAtod(v, &o->timeout_s) && o->timeout_s > 0;
  }
  if (flag == "--api") {
    if (std::string(v) != "callback" && std::string(v) != "sync") return false;
    o->callback = std::string(v) == "callback";
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // As myceld does (daemon/main.cc): Debian's Abseil checks every Mutex
  // acquisition, gRPC's own included, for lock-order cycles, a debugging
  // aid that took a few percent of the load generator's CPU, on the CPUs
  // the daemon under test shares.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  int puts = 1000;
  std::string base = "/tmp";
  LoadOptions load;
  bool load_mode = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag != "--puts" && flag != "--dir" &&
        ParseLoadFlag(flag, argv[i + 1], &load)) {
      load_mode = true;
      continue;
    }
    if (flag == "--puts" && absl::SimpleAtoi(argv[i + 1], &puts) && puts > 0) {
      continue;
    }
    if (flag == "--dir") {
      base = argv[i + 1];
      continue;
    }
    fprintf(stderr,
            "usage: state_put_bench [--puts N] [--dir DIR]\n"
            "       state_put_bench --socket PATH [--clients C] [--conns K]\n"
            "         [--duration S] [--warmup S] [--value-size B] "
            "[--timeout S] [--api callback|sync]\n");
    return 2;
  }
  if (argc % 2 == 0) {
    fprintf(stderr, "state_put_bench: %s needs a value\n", argv[argc - 1]);
    return 2;
  }
  if (load_mode) {
    if (load.socket.empty()) {
      fprintf(stderr, "state_put_bench: load mode needs --socket PATH\n");
      return 2;
    }
    return RunLoad(load);
  }
  Figures normal, full;
  if (!Measure(base, "normal", puts, &normal)) return 1;
  if (!Measure(base, "full", puts, &full)) return 1;
  printf("State.Put over the unix socket, one client, %d puts, state in %s\n",
         puts, base.c_str());
  printf("%-12s %10s %10s %10s\n", "durability", "p50 us", "p90 us", "p99 us");
  printf("%-12s %10.0f %10.0f %10.0f\n", "normal", normal.p50_us, normal.p90_us,
         normal.p99_us);
  printf("%-12s %10.0f %10.0f %10.0f\n", "full", full.p50_us, full.p90_us,
         full.p99_us);
  printf("full/normal median: %.2fx\n", full.p50_us / normal.p50_us);
  return 0;
}
