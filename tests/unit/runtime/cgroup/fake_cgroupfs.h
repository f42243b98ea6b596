// FakeCgroupFs: cgroupfs imitated on a plain temp directory, for unit tests
// of the cgroup drivers.
//
// A directory made through it gets the control files the kernel would show
// in a new cgroup, holding the kernel's defaults. Writes replace a file's
// content (as the kernel's value would change), except where the kernel
// does more: cgroup.procs gains a line, cgroup.subtree_control applies
// "+ctl -ctl", cgroup.kill empties the subtree and cgroup.freeze updates
// cgroup.events. rmdir refuses with EBUSY while tasks or child cgroups
// remain. Every write is recorded, in order, and chosen files can be made
// to fail with an errno.
#ifndef MYCEL_TESTS_UNIT_RUNTIME_CGROUP_FAKE_CGROUPFS_H_
#define MYCEL_TESTS_UNIT_RUNTIME_CGROUP_FAKE_CGROUPFS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/cgroup/cgroup_fs.h"

namespace mycel::testing {

using CgroupFiles = std::map<std::string, std::string>;

// The files of a fresh v2 cgroup with every controller enabled.
CgroupFiles V2CgroupFiles();
// The files of a fresh cgroup in a v1 hierarchy carrying `controllers`
// (e.g. {"cpu", "cpuacct"} for a "cpu,cpuacct" mount).
CgroupFiles V1CgroupFiles(const std::vector<std::string>& controllers);

// Creates `dir` (and parents) holding `files`.
void MakeFakeCgroup(const std::string& dir, const CgroupFiles& files);
// Replaces the content of one file (test setup: kernel-side changes).
void SetFile(const std::string& path, const std::string& content);
// The content of a file, or "<missing>".
std::string FileContent(const std::string& path);

class FakeCgroupFs final : public CgroupFs {
 public:
  struct WriteRecord {
    std::string path;
    std::string value;
  };

  // Directories made below `prefix` get `files`.
  void AddTemplate(const std::string& prefix, CgroupFiles files);
  // Writes to `path` fail with `errnum` from now on.
  void FailWrite(const std::string& path, int errnum);

  // Successful writes, in order.
  std::vector<WriteRecord> writes() const;
  // Paths written, in order, that end with `suffix`.
  std::vector<std::string> WritesTo(const std::string& suffix) const;
  // "<file name>=<value>" of the writes after the first `first`, in order.
  std::vector<std::string> WritesSince(size_t first) const;

  absl::Status MakeDir(const std::string& path) override;
  absl::Status RemoveDir(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Write(const std::string& path, absl::string_view value) override;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<std::string, CgroupFiles>> templates_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<WriteRecord> writes_ ABSL_GUARDED_BY(mu_);
};

// Every limit set, each to a value other than the kernel's default: what
// the driver tests create cells with.
CgroupLimits AllLimits();

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_UNIT_RUNTIME_CGROUP_FAKE_CGROUPFS_H_
