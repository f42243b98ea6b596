#include "runtime/mount.h"

#include <errno.h>
#include <sys/mount.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel {
namespace {

std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t j) { return s[j] >= '0' && s[j] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) &&
        octal(i + 3)) {
      int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      out.push_back(static_cast<char>(v));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string JoinRoot(const std::string& root, const std::string& target) {
  if (root.empty() || root == "/") return target;
  return root + target;
}

std::set<std::string> CurrentMountPoints() {
  std::set<std::string> out;
  absl::StatusOr<std::string> text = ReadFile("/proc/self/mountinfo");
  if (!text.ok()) return out;
  for (const MountInfo& m : ParseMountInfo(*text)) out.insert(m.mount_point);
  return out;
}

}  // namespace

std::vector<MountSpec> SystemMounts() {
  const unsigned long kSafe = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  return {
      {"proc", "/proc", "proc", kSafe, "", true},
      {"sysfs", "/sys", "sysfs", kSafe, "", true},
      {"devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755", true},
      {"devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
       "newinstance,ptmxmode=0666,mode=0620,gid=5", false},
      {"tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", false},
      {"tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755", true},
      {"tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", false},
      // favordynmods: a process's move into a cgroup (every executable a
      // cell starts) does not wait for an RCU grace period, which costs
      // 7-15 ms per start when starts are more than a few ms apart, at a
      // small cost to every fork and exit. Kernels before 6.0 lack it.
      {"cgroup2", "/sys/fs/cgroup", "cgroup2", kSafe, "nsdelegate,favordynmods",
       false, "nsdelegate"},
      {"tracefs", "/sys/kernel/tracing", "tracefs", kSafe, "", false},
      {"bpf", "/sys/fs/bpf", "bpf", MS_NOSUID | MS_NODEV, "mode=0700", false},
  };
}

std::vector<MountInfo> ParseMountInfo(absl::string_view text) {
  // id parent major:minor root mount-point options [optional...] - fstype
  // source super-options
  std::vector<MountInfo> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() < 10) continue;
    auto dash = std::find(f.begin() + 6, f.end(), "-");
    if (dash == f.end() || dash + 1 == f.end()) continue;
    out.push_back({Unescape(f[4]), std::string(*(dash + 1))});
  }
  return out;
}

absl::Status MountDevtmpfs(const std::string& target) {
  // An existing directory is the usual case; any other failure shows in
  // the mount's.
  MakeDir(target, 0755).IgnoreError();
  if (mount("devtmpfs", target.c_str(), "devtmpfs", MS_NOSUID, "mode=0755") !=
      0) {
    return PosixError(absl::StrCat("mount devtmpfs on ", target), errno);
  }
  return absl::OkStatus();
}

absl::Status MountAll(const std::string& root,
                      const std::vector<MountSpec>& specs,
                      std::vector<std::string>* warnings) {
  for (const MountSpec& spec : specs) {
    std::string target = JoinRoot(root, spec.target);
    // Re-read each time: mounting /proc makes mountinfo readable at all.
    if (CurrentMountPoints().count(target) != 0) continue;
    absl::Status s = MakeDirs(target, 0755);
    auto mount_with = [&](const std::string& data) {
      return mount(spec.source.c_str(), target.c_str(), spec.fstype.c_str(),
                   spec.flags, data.empty() ? nullptr : data.c_str());
    };
    if (s.ok() && mount_with(spec.data) != 0) {
      int error = errno;
      if (error == EINVAL && !spec.fallback_data.empty()) {
        error = mount_with(spec.fallback_data) == 0 ? 0 : errno;
      }
      if (error != 0) {
        s = PosixError(absl::StrCat("mount ", spec.fstype, " on ", target),
                       error);
      }
    }
    if (s.ok()) continue;
    if (spec.required) return s;
    warnings->push_back(std::string(s.message()));
  }
  return absl::OkStatus();
}

int UnmountAllBelow(const std::string& root,
                    std::vector<std::string>* warnings) {
  absl::StatusOr<std::string> text = ReadFile("/proc/self/mountinfo");
  if (!text.ok()) {
    warnings->push_back(std::string(text.status().message()));
    return 0;
  }
  std::vector<MountInfo> mounts = ParseMountInfo(*text);
  std::string prefix = root == "/" ? "/" : root + "/";
  int count = 0;
  // mountinfo lists parents before children: walk it backwards.
  for (auto it = mounts.rbegin(); it != mounts.rend(); ++it) {
    const std::string& mp = it->mount_point;
    if (mp == root || mp.rfind(prefix, 0) != 0) continue;
    if (umount2(mp.c_str(), 0) == 0) {
      ++count;
      continue;
    }
    int err = errno;
    if (err == EINVAL || err == ENOENT) continue;  // already gone
    if (mount(nullptr, mp.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) !=
        0) {
      warnings->push_back(std::string(
          PosixError(absl::StrCat("umount and remount-ro ", mp), err)
              .message()));
    }
  }
  return count;
}

}  // namespace mycel
