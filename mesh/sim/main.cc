// mycel-sim: runs one membership scenario in the deterministic simulator and
// prints its report (see mesh/sim/scenario.h). The same flags and seed print
// the same report, byte for byte; wall time and memory go to stderr.
//
//   mycel-sim --scenario join --nodes 10000 --seed 1
//   mycel-sim --scenario soak --nodes 500 --loss 0.2 --duration-s 300
//   mycel-sim --scenario partition --nodes 500 --duration-s 60
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "mesh/sim/scenario.h"

namespace {

constexpr char kUsage[] =
    "usage: mycel-sim [--scenario join|crash|restart|partition|soak|storm]\n"
    "                 [--nodes N] [--seed S] [--profile lan|wan]\n"
    "                 [--loss P] [--latency-ms MS] [--jitter-ms MS]\n"
    "                 [--connect-ms MS] [--gossip-uniform]\n"
    "                 [--warmup-s S] [--duration-s S] [--limit-s S]\n"
    "                 [--rest-s S]\n"
    "                 [--partition-fraction F] [--wire]\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "mycel-sim: %s\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  mycel::sim::ScenarioOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--wire") {
      o.sim.wire = true;
      continue;
    }
    if (flag == "--gossip-uniform") {
      o.gossip_uniform = true;
      continue;
    }
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Fail(flag + ": needs a value");
    }
    double d = 0;
    const bool number = absl::SimpleAtod(value, &d);
    if (flag == "--scenario") {
      o.scenario = value;
    } else if (flag == "--profile") {
      o.profile = value;
    } else if (!number) {
      return Fail(flag + ": not a number: " + value);
    } else if (flag == "--nodes") {
      o.nodes = static_cast<int>(d);
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(value, &o.sim.seed)) return Fail("--seed: bad");
    } else if (flag == "--loss") {
      if (d < 0 || d >= 1) return Fail("--loss: must be in [0, 1)");
      o.sim.network.loss = d;
    } else if (flag == "--latency-ms") {
      o.sim.network.latency = absl::Microseconds(d * 1000);
    } else if (flag == "--jitter-ms") {
      o.sim.network.jitter = absl::Microseconds(d * 1000);
    } else if (flag == "--connect-ms") {
      if (d < 0) return Fail("--connect-ms: must be >= 0");
      o.sim.network.connect = absl::Microseconds(d * 1000);
    } else if (flag == "--warmup-s") {
      o.warmup = absl::Milliseconds(d * 1000);
    } else if (flag == "--duration-s") {
      o.duration = absl::Milliseconds(d * 1000);
    } else if (flag == "--limit-s") {
      o.limit = absl::Milliseconds(d * 1000);
    } else if (flag == "--rest-s") {
      if (d < 0 || d > 3600) return Fail("--rest-s: from 0 to 3600");
      o.rest = absl::Milliseconds(d * 1000);
    } else if (flag == "--partition-fraction") {
      if (d <= 0 || d >= 1) return Fail("--partition-fraction: in (0, 1)");
      o.partition_fraction = d;
    } else {
      return Fail("unknown flag " + flag);
    }
  }

  const auto wall_start = std::chrono::steady_clock::now();
  absl::StatusOr<mycel::sim::Report> report = mycel::sim::RunScenario(o);
  if (!report.ok()) return Fail(report.status().ToString());
  const double wall = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - wall_start)
                          .count();
  std::fputs(mycel::sim::FormatReport(*report).c_str(), stdout);
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  std::fprintf(stderr, "wall_s = %.1f\npeak_rss_mib = %.0f\n", wall,
               usage.ru_maxrss / 1024.0);
  return 0;
}
