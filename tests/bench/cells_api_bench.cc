// cells_api_bench: the cost of running a sandboxed command through myceld's
// API, seen by a client that is already connected (no process start-up, no
// connection set-up: what a controller or a CI runner driving myceld pays).
//
//   cells_api_bench --socket PATH [--runs N] [--warmup W] [--concurrency C]
//                   [--gap-ms G] [--concurrent-only] [--tsv]
//
// Rows (p50/p90/p99 wall time in ms over N iterations, after W warm-ups):
//   Cells.List (empty)            one unary round trip: the gRPC floor
//   create+start+wait+delete      Cells.Create, Executables.Start /bin/true,
//                                 Executables.Wait, Cells.Delete
//     Cells.Create ... Cells.Delete   each step of those same iterations
//   Cells.Run                     the same work in one streaming call
//   C concurrent Cells.Run        C calls (default 8) on C threads, each
//                                 with its own cell, started together: the
//                                 wall time until all have ended (how far
//                                 concurrent runs overlap in the daemon)
//   Cells.Run after G ms idle     one call, after G ms (default 200) in which
//                                 the bench sends nothing: how a user's
//                                 occasional run is served
//   C concurrent Cells.Run after G ms idle
//                                 the C calls, after the same pause. On a
//                                 cgroup v1 host without favordynmods the
//                                 first cgroup move after a pause waits for
//                                 an RCU grace period (the kernel's
//                                 cgroup_threadgroup_rwsem), off-CPU; runs
//                                 that do not serialise in the daemon do
//                                 their other work during that wait
//                                 (--gap-ms 0 leaves both rows out)
// --concurrent-only runs the two concurrent rows alone (for a trace of
// them, tests/bench/run_overlap.sh).
// Beside the percentiles, "busy CPUs" is the machine's busy time (every
// process and the kernel, from /proc/stat) over the row's wall time: 1.0
// means one CPU was busy for as long as the row ran. A row that takes long
// with few busy CPUs is waiting, not computing.
// The rows are interleaved (one iteration of each in turn), so that a burst
// of load on a shared machine lands on all of them alike.
//
// The cell is the one `mycel run --isolate pid,mount,uts,ipc --memory-max 64M
// --pids-max 100 --seccomp default` creates. Every iteration checks that
// /bin/true ran and exited 0; any failure stops the bench with the RPC's
// status and exit code 1 (no row is printed from a partial run).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "runtime/status.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMemoryMax = int64_t{64} << 20;
constexpr int64_t kPidsMax = 100;
constexpr char kCommand[] = "/bin/true";
constexpr auto kCallTimeout = std::chrono::seconds(30);

struct Options {
  std::string socket;
  int runs = 200;
  int warmup = 10;
  int concurrency = 8;
  int gap_ms = 200;
  bool concurrent_only = false;
  bool tsv = false;
};

void Usage() {
  fprintf(stderr,
          "usage: cells_api_bench --socket PATH [--runs N] [--warmup W] "
          "[--concurrency C] [--gap-ms G] [--concurrent-only] [--tsv]\n");
}

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view flag = argv[i];
    if (flag == "--tsv") {
      o.tsv = true;
      continue;
    }
    if (flag == "--concurrent-only") {
      o.concurrent_only = true;
      continue;
    }
    if (i + 1 >= argc) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": missing value (or unknown flag)"));
    }
    absl::string_view value = argv[++i];
    if (flag == "--socket") {
      o.socket = std::string(value);
    } else if (flag == "--runs") {
      if (!absl::SimpleAtoi(value, &o.runs) || o.runs < 1) {
        return absl::InvalidArgumentError("--runs: want a number >= 1");
      }
    } else if (flag == "--warmup") {
      if (!absl::SimpleAtoi(value, &o.warmup) || o.warmup < 0) {
        return absl::InvalidArgumentError("--warmup: want a number >= 0");
      }
    } else if (flag == "--concurrency") {
      if (!absl::SimpleAtoi(value, &o.concurrency) || o.concurrency < 1 ||
          o.concurrency > 64) {
        return absl::InvalidArgumentError(
            "--concurrency: want a number from 1 to 64");
      }
    } else if (flag == "--gap-ms") {
      if (!absl::SimpleAtoi(value, &o.gap_ms) || o.gap_ms < 0 ||
          o.gap_ms > 10000) {
        return absl::InvalidArgumentError(
            "--gap-ms: want a number from 0 to 10000");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
  }
  if (o.socket.empty()) return absl::InvalidArgumentError("--socket: missing");
  return o;
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

// The cell every iteration creates.
mycel::v1::CellSpec BenchCell(const std::string& name) {
  mycel::v1::CellSpec spec;
  spec.set_name(name);
  for (mycel::v1::Namespace ns :
       {mycel::v1::NAMESPACE_PID, mycel::v1::NAMESPACE_MOUNT,
        mycel::v1::NAMESPACE_UTS, mycel::v1::NAMESPACE_IPC}) {
    spec.add_isolate(ns);
  }
  spec.mutable_limits()->set_memory_max(kMemoryMax);
  spec.mutable_limits()->set_pids_max(kPidsMax);
  spec.set_seccomp("default");
  return spec;
}

absl::Status CheckExitedZero(const mycel::v1::ExecutableStatus& st,
                             absl::string_view what) {
  if (st.state() == mycel::v1::EXECUTABLE_STATE_EXITED && st.has_exit_code() &&
      st.exit_code() == 0) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(
      what, ": ", kCommand, " did not exit 0 (state ",
      mycel::v1::ExecutableState_Name(st.state()), ", exit_code ",
      st.has_exit_code() ? st.exit_code() : -1, ", signal ",
      st.has_signal() ? st.signal() : 0, ", message \"", st.message(), "\")"));
}

class Client final {
 public:
  explicit Client(const std::shared_ptr<grpc::Channel>& channel)
      : cells_(mycel::v1::Cells::NewStub(channel)),
        exes_(mycel::v1::Executables::NewStub(channel)) {}

  absl::Status List() {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    mycel::v1::ListCellsResponse resp;
    return FromGrpc(cells_->List(&ctx, mycel::v1::ListCellsRequest(), &resp),
                    "Cells.List");
  }

  absl::Status Create(const std::string& cell) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    mycel::v1::CreateCellRequest req;
    *req.mutable_spec() = BenchCell(cell);
    mycel::v1::Cell resp;
    return FromGrpc(cells_->Create(&ctx, req, &resp),
                    absl::StrCat("Cells.Create ", cell));
  }

  absl::Status Start(const std::string& cell) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    mycel::v1::StartRequest req;
    req.mutable_spec()->set_cell(cell);
    req.mutable_spec()->set_name("main");
    req.mutable_spec()->add_command(kCommand);
    mycel::v1::Executable resp;
    return FromGrpc(exes_->Start(&ctx, req, &resp),
                    absl::StrCat("Executables.Start ", cell, "/main"));
  }

  absl::Status Wait(const std::string& cell) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    mycel::v1::ExecutableRef req;
    req.set_cell(cell);
    req.set_name("main");
    mycel::v1::Executable resp;
    std::string what = absl::StrCat("Executables.Wait ", cell, "/main");
    RETURN_IF_ERROR(FromGrpc(exes_->Wait(&ctx, req, &resp), what));
    return CheckExitedZero(resp.status(), what);
  }

  absl::Status Delete(const std::string& cell, bool force) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    mycel::v1::DeleteCellRequest req;
    req.set_name(cell);
    req.set_force(force);
    mycel::v1::DeleteCellResponse resp;
    return FromGrpc(cells_->Delete(&ctx, req, &resp),
                    absl::StrCat("Cells.Delete ", cell));
  }

  absl::Status Run(const std::string& cell) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    mycel::v1::RunRequest req;
    *req.mutable_cell() = BenchCell(cell);
    req.add_command(kCommand);
    std::unique_ptr<grpc::ClientReader<mycel::v1::RunEvent>> reader =
        cells_->Run(&ctx, req);
    mycel::v1::RunEvent ev;
    bool exited = false;
    mycel::v1::ExecutableStatus exit;
    while (reader->Read(&ev)) {
      if (ev.has_exit()) {
        exit = ev.exit();
        exited = true;
      }
    }
    std::string what = absl::StrCat("Cells.Run ", cell);
    RETURN_IF_ERROR(FromGrpc(reader->Finish(), what));
    if (!exited) {
      return absl::InternalError(
          absl::StrCat(what, ": the stream ended without an exit event"));
    }
    return CheckExitedZero(exit, what);
  }

 private:
  static void SetDeadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  }

  std::unique_ptr<mycel::v1::Cells::Stub> cells_;
  std::unique_ptr<mycel::v1::Executables::Stub> exes_;
};

double MsSince(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

struct Series {
  std::string name;
  std::vector<double> ms;
  double busy_s = 0;  // machine busy time during the kept samples
  double wall_s = 0;  // the kept samples' wall time
};

// The machine's busy time so far, in seconds: user, nice, system, irq,
// softirq and steal of /proc/stat's "cpu" line (not idle, not iowait).
double BusySeconds() {
  FILE* f = fopen("/proc/stat", "r");
  if (f == nullptr) return 0;
  unsigned long long v[8] = {};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                 &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  if (n != 8) return 0;
  const double busy = static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6] +
                                          v[7]);  // not idle (3), iowait (4)
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Records one sample of `s` that started at `start`, when the machine's busy
// time was `busy_before`.
void Keep(Series& s, Clock::time_point start, double busy_before) {
  const double ms = MsSince(start, Clock::now());
  s.ms.push_back(ms);
  s.wall_s += ms / 1000;
  s.busy_s += BusySeconds() - busy_before;
}

// Nearest-rank percentile of sorted samples.
double Percentile(const std::vector<double>& sorted, double q) {
  size_t rank =
      static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// One iteration of the four-call sequence. On a failure after the cell
// exists, the cell is deleted (force) so that a failed bench leaves no cell
// behind; the first error is the one returned.
absl::Status Sequence(Client& client, const std::string& cell,
                      Clock::time_point (&t)[5]) {
  t[0] = Clock::now();
  RETURN_IF_ERROR(client.Create(cell));
  t[1] = Clock::now();
  absl::Status s = client.Start(cell);
  t[2] = Clock::now();
  if (s.ok()) s = client.Wait(cell);
  t[3] = Clock::now();
  if (!s.ok()) {
    client.Delete(cell, /*force=*/true).IgnoreError();  // `s` is the error
    return s;
  }
  RETURN_IF_ERROR(client.Delete(cell, /*force=*/false));
  t[4] = Clock::now();
  return absl::OkStatus();
}

// `n` Cells.Run calls at once, each on its own thread and cell; the first
// error is returned once all have ended.
absl::Status ConcurrentRuns(Client& client, const std::string& prefix, int n) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&client, &results, &prefix, t] {
      results[t] = client.Run(absl::StrCat(prefix, t));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status Bench(const Options& o) {
  grpc::ChannelArguments args;
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(absl::StrCat("unix:", o.socket),
                                grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(5))) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to myceld at unix:", o.socket));
  }
  Client client(channel);

  enum {
    kList,
    kSequence,
    kCreate,
    kStart,
    kWait,
    kDelete,
    kRun,
    kConcurrent,
    kRunAfterGap,
    kConcurrentAfterGap,
    kRows
  };
  std::vector<Series> rows(kRows);
  rows[kList].name = "Cells.List (empty): gRPC floor";
  rows[kSequence].name = "create+start+wait+delete";
  rows[kCreate].name = "  Cells.Create";
  rows[kStart].name = "  Executables.Start";
  rows[kWait].name = "  Executables.Wait";
  rows[kDelete].name = "  Cells.Delete";
  rows[kRun].name = "Cells.Run (one call)";
  rows[kConcurrent].name =
      absl::StrCat(o.concurrency, " concurrent Cells.Run (all done)");
  rows[kRunAfterGap].name =
      absl::StrCat("Cells.Run after ", o.gap_ms, " ms idle");
  rows[kConcurrentAfterGap].name = absl::StrCat(
      o.concurrency, " concurrent Cells.Run after ", o.gap_ms, " ms idle");
  if (o.gap_ms == 0) rows.resize(kRunAfterGap);
  for (Series& s : rows) s.ms.reserve(o.runs);
  const auto gap = std::chrono::milliseconds(o.gap_ms);

  const std::string prefix = absl::StrCat("apibench-", getpid(), "-");
  for (int i = 0; i < o.warmup + o.runs; ++i) {
    const bool keep = i >= o.warmup;

    double busy;
    Clock::time_point start;
    if (!o.concurrent_only) {
      busy = BusySeconds();
      start = Clock::now();
      RETURN_IF_ERROR(client.List());
      if (keep) Keep(rows[kList], start, busy);

      busy = BusySeconds();
      Clock::time_point t[5];
      RETURN_IF_ERROR(Sequence(client, absl::StrCat(prefix, "s", i), t));
      if (keep) {
        Keep(rows[kSequence], t[0], busy);
        for (int step = 0; step < 4; ++step) {
          rows[kCreate + step].ms.push_back(MsSince(t[step], t[step + 1]));
        }
      }

      busy = BusySeconds();
      start = Clock::now();
      RETURN_IF_ERROR(client.Run(absl::StrCat(prefix, "r", i)));
      if (keep) Keep(rows[kRun], start, busy);
    }

    busy = BusySeconds();
    start = Clock::now();
    RETURN_IF_ERROR(ConcurrentRuns(client, absl::StrCat(prefix, "c", i, "-"),
                                   o.concurrency));
    if (keep) Keep(rows[kConcurrent], start, busy);

    if (o.gap_ms == 0) continue;
    if (!o.concurrent_only) {
      std::this_thread::sleep_for(gap);
      busy = BusySeconds();
      start = Clock::now();
      RETURN_IF_ERROR(client.Run(absl::StrCat(prefix, "g", i)));
      if (keep) Keep(rows[kRunAfterGap], start, busy);
    }

    std::this_thread::sleep_for(gap);
    busy = BusySeconds();
    start = Clock::now();
    RETURN_IF_ERROR(ConcurrentRuns(client, absl::StrCat(prefix, "gc", i, "-"),
                                   o.concurrency));
    if (keep) Keep(rows[kConcurrentAfterGap], start, busy);
  }

  if (!o.tsv) {
    printf(
        "cells_api_bench: %d iterations after %d warm-ups; cell: "
        "pid,mount,uts,ipc, memory.max 64M, pids.max 100, seccomp default; "
        "command %s\n",
        o.runs, o.warmup, kCommand);
    printf("%-42s %9s %9s %9s %10s\n", "row", "p50 ms", "p90 ms", "p99 ms",
           "busy CPUs");
  }
  for (Series& s : rows) {
    if (s.ms.empty()) continue;  // a row --concurrent-only leaves out
    std::sort(s.ms.begin(), s.ms.end());
    double p50 = Percentile(s.ms, 0.50), p90 = Percentile(s.ms, 0.90),
           p99 = Percentile(s.ms, 0.99);
    // Steps of the sequence have no busy time of their own: "-".
    const std::string cpus =
        s.wall_s > 0 ? absl::StrFormat("%.2f", s.busy_s / s.wall_s) : "-";
    if (o.tsv) {
      printf("%s\t%.3f\t%.3f\t%.3f\t%s\n", s.name.c_str(), p50, p90, p99,
             cpus.c_str());
    } else {
      printf("%-42s %9.2f %9.2f %9.2f %10s\n", s.name.c_str(), p50, p90, p99,
             cpus.c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<Options> options = ParseFlags(argc, argv);
  if (!options.ok()) {
    fprintf(stderr, "cells_api_bench: %s\n",
            std::string(options.status().message()).c_str());
    Usage();
    return 2;
  }
  absl::Status s = Bench(*options);
  if (!s.ok()) {
    fprintf(stderr, "cells_api_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
