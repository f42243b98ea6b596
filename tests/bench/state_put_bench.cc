// state_put_bench: what --durability costs a client's State.Put.
//
//   state_put_bench [--puts N] [--dir DIR]
//
// Starts myceld twice on a fresh state directory under DIR (default /tmp;
// put it on the disk whose cost you want), with --durability normal and
// then full, and makes N sequential Puts of a 100-byte JSON value over the
// unix socket, each waiting for its answer (one client: latency, not
// throughput). Prints median, p90 and p99 per mode and the ratio of the
// medians.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

}  // namespace

int main(int argc, char** argv) {
  int puts = 1000;
  std::string base = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--puts" && absl::SimpleAtoi(argv[i + 1], &puts) && puts > 0) {
      continue;
    }
    if (flag == "--dir") {
      base = argv[i + 1];
      continue;
    }
    fprintf(stderr, "usage: state_put_bench [--puts N] [--dir DIR]\n");
    return 2;
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
