#include "tests/unit/runtime/cgroup/fake_cgroupfs.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "runtime/status.h"

namespace mycel::testing {
namespace {

namespace fs = std::filesystem;

// The limit v1 shows for "unlimited": LONG_MAX rounded down to a page.
constexpr char kV1Unlimited[] = "9223372036854771712\n";

bool HasChildDirs(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory()) return true;
  }
  return false;
}

// Empties cgroup.procs in `dir` and below, as SIGKILL to all would.
void EmptyTree(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir + "/cgroup.procs")) SetFile(dir + "/cgroup.procs", "");
  if (fs::exists(dir + "/cgroup.events")) {
    std::string events = FileContent(dir + "/cgroup.events");
    absl::StrReplaceAll({{"populated 1", "populated 0"}}, &events);
    SetFile(dir + "/cgroup.events", events);
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory()) EmptyTree(entry.path().string());
  }
}

}  // namespace

CgroupFiles V2CgroupFiles() {
  return {
      {"cgroup.controllers", "cpuset cpu io memory pids\n"},
      {"cgroup.subtree_control", "\n"},
      {"cgroup.procs", ""},
      {"cgroup.threads", ""},
      {"cgroup.type", "domain\n"},
      {"cgroup.events", "populated 0\nfrozen 0\n"},
      {"cgroup.freeze", "0\n"},
      {"cgroup.kill", ""},
      {"cpu.max", "max 100000\n"},
      {"cpu.weight", "100\n"},
      {"cpu.stat",
       "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"
       "core_sched.force_idle_usec 0\nnr_periods 0\nnr_throttled 0\n"
       "throttled_usec 0\nnr_bursts 0\nburst_usec 0\n"},
      {"cpuset.cpus", "\n"},
      {"cpuset.mems", "\n"},
      {"cpuset.cpus.effective", "0-1\n"},
      {"cpuset.mems.effective", "0\n"},
      {"io.max", ""},
      {"io.weight", "default 100\n"},
      {"memory.current", "0\n"},
      {"memory.peak", "0\n"},
      {"memory.min", "0\n"},
      {"memory.low", "0\n"},
      {"memory.high", "max\n"},
      {"memory.max", "max\n"},
      {"memory.swap.current", "0\n"},
      {"memory.swap.max", "max\n"},
      {"memory.events",
       "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"},
      {"memory.stat", "anon 0\nfile 0\nkernel 0\nshmem 0\n"},
      {"pids.current", "0\n"},
      {"pids.max", "max\n"},
      {"pids.events", "max 0\n"},
  };
}

CgroupFiles V1CgroupFiles(const std::vector<std::string>& controllers) {
  CgroupFiles files = {
      {"cgroup.procs", ""},
      {"tasks", ""},
      {"cgroup.clone_children", "0\n"},
      {"notify_on_release", "0\n"},
  };
  for (const std::string& c : controllers) {
    if (c == "cpu") {
      files["cpu.cfs_period_us"] = "100000\n";
      files["cpu.cfs_quota_us"] = "-1\n";
      files["cpu.shares"] = "1024\n";
      files["cpu.stat"] = "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n";
    } else if (c == "cpuacct") {
      files["cpuacct.usage"] = "0\n";
      files["cpuacct.stat"] = "user 0\nsystem 0\n";
    } else if (c == "cpuset") {
      files["cpuset.cpus"] = "\n";
      files["cpuset.mems"] = "\n";
      files["cpuset.effective_cpus"] = "\n";
      files["cpuset.effective_mems"] = "\n";
    } else if (c == "memory") {
      files["memory.limit_in_bytes"] = kV1Unlimited;
      files["memory.memsw.limit_in_bytes"] = kV1Unlimited;
      files["memory.soft_limit_in_bytes"] = kV1Unlimited;
      files["memory.usage_in_bytes"] = "0\n";
      files["memory.max_usage_in_bytes"] = "0\n";
      files["memory.memsw.usage_in_bytes"] = "0\n";
      files["memory.oom_control"] =
          "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n";
      files["memory.stat"] = "cache 0\nrss 0\ntotal_cache 0\ntotal_rss 0\n";
    } else if (c == "pids") {
      files["pids.max"] = "max\n";
      files["pids.current"] = "0\n";
      files["pids.events"] = "max 0\n";
    } else if (c == "freezer") {
      files["freezer.state"] = "THAWED\n";
      files["freezer.self_freezing"] = "0\n";
      files["freezer.parent_freezing"] = "0\n";
    }
  }
  return files;
}

void MakeFakeCgroup(const std::string& dir, const CgroupFiles& files) {
  fs::create_directories(dir);
  for (const auto& [name, content] : files) SetFile(dir + "/" + name, content);
}

void SetFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::trunc);
  out << content;
}

std::string FileContent(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "<missing>";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void FakeCgroupFs::AddTemplate(const std::string& prefix, CgroupFiles files) {
  absl::MutexLock lock(&mu_);
  templates_.emplace_back(prefix, std::move(files));
}

void FakeCgroupFs::FailWrite(const std::string& path, int errnum) {
  absl::MutexLock lock(&mu_);
  failures_[path] = errnum;
}

std::vector<FakeCgroupFs::WriteRecord> FakeCgroupFs::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

std::vector<std::string> FakeCgroupFs::WritesTo(
    const std::string& suffix) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const WriteRecord& w : writes_) {
    if (absl::EndsWith(w.path, suffix)) out.push_back(w.value);
  }
  return out;
}

std::vector<std::string> FakeCgroupFs::WritesSince(size_t first) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (size_t i = first; i < writes_.size(); ++i) {
    const WriteRecord& w = writes_[i];
    out.push_back(
        absl::StrCat(w.path.substr(w.path.rfind('/') + 1), "=", w.value));
  }
  return out;
}

absl::Status FakeCgroupFs::MakeDir(const std::string& path) {
  absl::MutexLock lock(&mu_);
  if (mkdir(path.c_str(), 0755) != 0) {
    return PosixError(absl::StrCat("mkdir ", path), errno);
  }
  for (const auto& [prefix, files] : templates_) {
    if (absl::StartsWith(path, prefix + "/")) {
      for (const auto& [name, content] : files) {
        SetFile(path + "/" + name, content);
      }
      break;
    }
  }
  // v1: a parent with cgroup.clone_children set passes the flag on, and a
  // new cpuset cgroup copies the parent's CPUs and memory nodes.
  std::string parent = path.substr(0, path.rfind('/'));
  if (absl::StripAsciiWhitespace(
          FileContent(parent + "/cgroup.clone_children")) == "1") {
    SetFile(path + "/cgroup.clone_children", "1\n");
    for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
      std::string inherited = FileContent(parent + "/" + file);
      if (inherited != "<missing>") SetFile(path + "/" + file, inherited);
    }
  }
  return absl::OkStatus();
}

absl::Status FakeCgroupFs::Rename(const std::string& from,
                                  const std::string& to) {
  absl::MutexLock lock(&mu_);
  // The kernel's cgroupfs refuses to replace an existing directory.
  struct stat st;
  if (stat(to.c_str(), &st) == 0) {
    return PosixError(absl::StrCat("rename ", from, " to ", to), EEXIST);
  }
  if (rename(from.c_str(), to.c_str()) != 0) {
    return PosixError(absl::StrCat("rename ", from, " to ", to), errno);
  }
  return absl::OkStatus();
}

absl::Status FakeCgroupFs::RemoveDir(const std::string& path) {
  absl::MutexLock lock(&mu_);
  std::string procs = FileContent(path + "/cgroup.procs");
  if (HasChildDirs(path) || (procs != "<missing>" && !procs.empty())) {
    return PosixError(absl::StrCat("rmdir ", path), EBUSY);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    fs::remove(entry.path(), ec);
  }
  if (rmdir(path.c_str()) != 0) {
    return PosixError(absl::StrCat("rmdir ", path), errno);
  }
  return absl::OkStatus();
}

absl::Status FakeCgroupFs::Write(const std::string& path,
                                 absl::string_view value) {
  absl::MutexLock lock(&mu_);
  auto failure = failures_.find(path);
  if (failure != failures_.end()) {
    return CgroupWriteError(path, value, failure->second);
  }
  if (!fs::is_regular_file(path)) {
    return CgroupWriteError(path, value, ENOENT);
  }
  writes_.push_back({path, std::string(value)});
  std::string name = fs::path(path).filename().string();
  std::string dir = fs::path(path).parent_path().string();
  if (name == "cgroup.procs") {
    SetFile(path, absl::StrCat(FileContent(path), value, "\n"));
  } else if (name == "cgroup.subtree_control") {
    std::set<std::string> enabled = absl::StrSplit(
        FileContent(path), absl::ByAnyChar(" \n"), absl::SkipEmpty());
    for (absl::string_view op : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
      if (op[0] == '+') enabled.emplace(op.substr(1));
      if (op[0] == '-') enabled.erase(std::string(op.substr(1)));
    }
    SetFile(path, absl::StrCat(absl::StrJoin(enabled, " "), "\n"));
  } else if (name == "cgroup.kill") {
    if (value == "1") EmptyTree(dir);
  } else if (name == "cgroup.freeze") {
    std::string events = FileContent(dir + "/cgroup.events");
    absl::StrReplaceAll({{value == "1" ? "frozen 0" : "frozen 1",
                          value == "1" ? "frozen 1" : "frozen 0"}},
                        &events);
    SetFile(dir + "/cgroup.events", events);
    SetFile(path, std::string(value));
  } else {
    SetFile(path, std::string(value));
  }
  return absl::OkStatus();
}

CgroupLimits AllLimits() {
  CgroupLimits l;
  l.cpu_max = 0.5;
  l.cpu_weight = 200;
  l.memory_max = 32 << 20;
  l.memory_high = 16 << 20;
  l.memory_swap_max = 0;
  l.pids_max = 20;
  l.cpuset_cpus = "1";
  l.cpuset_mems = "0";
  return l;
}

}  // namespace mycel::testing
