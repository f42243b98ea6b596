#include "runtime/host_info.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "runtime/fs.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

bool IsFsType(const std::string& path, long magic) {
  struct statfs st;
  if (statfs(path.c_str(), &st) != 0) return false;
  return st.f_type == magic;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// seccomp: PR_GET_SECCOMP answers EINVAL when the kernel lacks it.
bool ProbeSeccomp() {
  return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 || errno != EINVAL;
}

// bpf: BPF_PROG_LOAD with an empty program fails with EINVAL when bpf(2)
// works for us, and with ENOSYS/EPERM when it does not.
bool ProbeBpf() {
  union bpf_attr attr = {};
  attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  long r = syscall(__NR_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
  if (r >= 0) {
    close(static_cast<int>(r));
    return true;
  }
  return errno == EINVAL || errno == E2BIG;
}

bool ProbeKvm() {
  UniqueFd fd(open("/dev/kvm", O_RDWR | O_CLOEXEC));
  return fd.valid();
}

bool ProbeUserNamespaces() {
  int64_t max = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadSmallFile(
                            "/proc/sys/user/max_user_namespaces")),
                        &max) ||
      max <= 0) {
    return false;
  }
  // Debian's knob for unprivileged use does not matter for root, which is
  // how myceld runs; only its absence of support does.
  return access("/proc/self/ns/user", F_OK) == 0;
}

std::vector<std::string> V2Controllers(const std::string& mount) {
  if (mount.empty()) return {};
  std::string text = ReadSmallFile(mount + "/cgroup.controllers");
  return absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty());
}

std::vector<std::string> V1Controllers() {
  // /proc/cgroups: name hierarchy num_cgroups enabled. A controller with a
  // non-zero hierarchy id is mounted on v1.
  std::vector<std::string> out;
  std::ifstream in("/proc/cgroups");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (cols.size() >= 4 && cols[1] != "0" && cols[3] == "1") {
      out.push_back(cols[0]);
    }
  }
  return out;
}

}  // namespace

absl::string_view CgroupModeName(CgroupMode mode) {
  switch (mode) {
    case CgroupMode::kNone:
      return "none";
    case CgroupMode::kV1:
      return "v1";
    case CgroupMode::kHybrid:
      return "hybrid";
    case CgroupMode::kV2:
      return "v2";
  }
  return "none";
}

CgroupMode DetectCgroupMode(const std::string& cgroup_root,
                            std::string* cgroup2_mount) {
  cgroup2_mount->clear();
  if (IsFsType(cgroup_root, CGROUP2_SUPER_MAGIC)) {
    *cgroup2_mount = cgroup_root;
    return CgroupMode::kV2;
  }
  if (!IsFsType(cgroup_root, TMPFS_MAGIC)) return CgroupMode::kNone;
  // v1 layout: a tmpfs with one mount per controller (hierarchy) below.
  if (IsFsType(cgroup_root + "/unified", CGROUP2_SUPER_MAGIC)) {
    *cgroup2_mount = cgroup_root + "/unified";
    return CgroupMode::kHybrid;
  }
  return CgroupMode::kV1;
}

bool CgroupMovesFavored(absl::string_view mountinfo) {
  // id parent major:minor root mount-point options [optional...] - fstype
  // source super-options
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    auto dash = std::find(f.begin(), f.end(), "-");
    if (dash == f.end() || f.end() - dash < 4 ||
        (dash[1] != "cgroup2" && dash[1] != "cgroup")) {
      continue;
    }
    for (absl::string_view option : absl::StrSplit(dash[3], ',')) {
      if (option == "favordynmods") return true;
    }
  }
  return false;
}

HostInfo ProbeHost(const std::string& cgroup_root) {
  HostInfo info;
  struct utsname u;
  if (uname(&u) == 0) info.kernel_release = u.release;
  info.cgroup_mode = DetectCgroupMode(cgroup_root, &info.cgroup2_mount);
  if (info.cgroup_mode == CgroupMode::kV1 ||
      info.cgroup_mode == CgroupMode::kHybrid) {
    info.cgroup_v1_controllers = V1Controllers();
  }
  info.cgroup_v2_controllers = V2Controllers(info.cgroup2_mount);
  info.cgroup_favordynmods =
      CgroupMovesFavored(ReadSmallFile("/proc/self/mountinfo"));
  info.seccomp = ProbeSeccomp();
  info.bpf = ProbeBpf();
  info.btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
  info.kvm = ProbeKvm();
  info.user_namespaces = ProbeUserNamespaces();
  return info;
}

int PossibleMemoryNodes() {
  absl::StatusOr<std::string> list =
      ReadFile("/sys/devices/system/node/possible");
  if (!list.ok()) return 0;
  // "0" or "0-3" or "0,2-3": the last number is the highest node.
  absl::string_view text = absl::StripAsciiWhitespace(*list);
  size_t sep = text.find_last_of(",-");
  absl::string_view last =
      sep == absl::string_view::npos ? text : text.substr(sep + 1);
  int highest = 0;
  if (!absl::SimpleAtoi(last, &highest) || highest < 0) return 0;
  return highest + 1;
}

int OnlineCpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

absl::StatusOr<std::string> Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) {
    return PosixError("gethostname", errno);
  }
  return std::string(buf);
}

}  // namespace mycel
