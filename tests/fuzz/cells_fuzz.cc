// cells_fuzz: the cell and executable specs a client sends (Cells.Create,
// Cells.Run, Executables.Start) into the checks and preparation that stand
// between them and clone3 (cells/prepared_cell.h, spec_validation.h). The
// first byte picks (% 3): a CellSpec, an ExecutableSpec (each the bytes of
// the message, as gRPC would hand them over), or a uid_map text.
//
// Checked, besides the error codes (INVALID_ARGUMENT naming a field):
//  - a cell spec accepted compiles to a seccomp filter, run here in a BPF
//    interpreter for x86_64, that denies every syscall the same profile
//    denies without the spec's extras (extra_deny only adds), denies each
//    extra_deny name, and, for a cell without a pid namespace, refuses
//    kill, tkill and tgkill aimed at PID 1, at the daemon or at everyone;
//    profile none with nothing extra compiles to no filter;
//  - an executable spec accepted has a command, no NUL, KEY=VALUE
//    environment, an absolute cwd, real ids;
//  - an id map accepted has ranges that are not empty, do not overlap and
//    do not reach the id 4294967295, and maps each range's first id.
#include <linux/audit.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/syscall.h>

#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cells/prepared_cell.h"
#include "cells/spec_validation.h"
#include "runtime/seccomp/seccomp_profile.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/unit/runtime/seccomp/bpf_interpreter.h"

namespace mycel::cells {
namespace {

constexpr pid_t kDaemon = 4242;
// Syscall numbers checked for monotonicity (x86_64 has fewer).
constexpr int kMaxNr = 460;

HostShape Host() {
  return {.num_cpus = 2, .num_memory_nodes = 1, .protected_pids = {1, kDaemon}};
}

uint32_t Decide(const SeccompProgram& p, int nr,
                std::initializer_list<uint64_t> args = {}) {
  absl::StatusOr<uint32_t> r = testing::RunSeccompFilter(
      p.instructions(), testing::SyscallData(AUDIT_ARCH_X86_64, nr, args));
  FUZZ_CHECK(r.ok(), r.status().ToString());
  return r.value();
}

bool Allowed(uint32_t action) {
  return (action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ALLOW;
}

// What the profile alone allows, by syscall (zero arguments), with and
// without a pid namespace: computed once per case.
const std::vector<bool>& BaseAllowed(SeccompProfileKind kind, bool pid_ns) {
  static std::map<std::pair<SeccompProfileKind, bool>, std::vector<bool>> cache;
  std::vector<bool>& allowed = cache[{kind, pid_ns}];
  if (allowed.empty()) {
    SeccompOptions so{.profile = kind};
    if (!pid_ns) {
      so.protected_pids = Host().protected_pids;
      so.deny_broadcast_signals = true;
    }
    absl::StatusOr<SeccompProgram> base = CompileSeccomp(so);
    FUZZ_CHECK(base.ok(), base.status().ToString());
    for (int nr = 0; nr < kMaxNr; ++nr) {
      allowed.push_back(base->empty() || Allowed(Decide(*base, nr)));
    }
  }
  return allowed;
}

void CheckRefusal(const absl::Status& s) {
  FUZZ_CHECK(absl::IsInvalidArgument(s), s.ToString());
  // "field: why", the field first.
  const size_t colon = s.message().find(": ");
  FUZZ_CHECK(colon != absl::string_view::npos && colon > 0, s.ToString());
}

void Cell(const std::string& bytes) {
  mycel::v1::CellSpec spec;
  if (!spec.ParseFromString(bytes)) return;  // gRPC would refuse it
  absl::StatusOr<PreparedCell> cell = PrepareCell(spec, Host());
  if (!cell.ok()) return CheckRefusal(cell.status());
  absl::StatusOr<int> flags = NamespaceFlags(spec);
  FUZZ_CHECK(flags.ok() && *flags == cell->ns_flags, "namespace flags");
  const bool user_ns = (cell->ns_flags & CLONE_NEWUSER) != 0;
  FUZZ_CHECK(user_ns || (spec.uid_map().empty() && spec.gid_map().empty()),
             "an id map without a user namespace");
  absl::StatusOr<SeccompProfileKind> kind =
      ParseSeccompProfile(spec.seccomp().empty() ? "default" : spec.seccomp());
  FUZZ_CHECK(kind.ok(), kind.status().ToString());
  const SeccompProgram& filter = cell->seccomp;
  if (*kind == SeccompProfileKind::kNone && spec.seccomp_deny().empty()) {
    FUZZ_CHECK(filter.empty(), "profile none compiled to a filter");
    return;
  }
  FUZZ_CHECK(!filter.empty(), "no filter");
  const bool pid_ns = (cell->ns_flags & CLONE_NEWPID) != 0;
  const std::vector<bool>& base = BaseAllowed(*kind, pid_ns);
  for (int nr = 0; nr < kMaxNr; ++nr) {
    if (!base[nr]) {
      FUZZ_CHECK(!Allowed(Decide(filter, nr)),
                 absl::StrCat("syscall ", nr,
                              " allowed by the spec's filter, "
                              "denied by its profile"));
    }
  }
  for (const std::string& name : spec.seccomp_deny()) {
    const int nr =
        seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name.c_str());
    if (nr < 0) continue;  // another architecture's
    FUZZ_CHECK(!Allowed(Decide(filter, nr)), name);
  }
  if (!pid_ns && *kind != SeccompProfileKind::kNone) {
    constexpr uint64_t kEveryone = ~uint64_t{0};  // -1
    for (uint64_t pid : {uint64_t{1}, uint64_t{kDaemon}}) {
      FUZZ_CHECK(!Allowed(Decide(filter, SYS_kill, {pid, SIGKILL})),
                 absl::StrCat("kill ", pid));
      FUZZ_CHECK(!Allowed(Decide(filter, SYS_tkill, {pid, SIGKILL})),
                 absl::StrCat("tkill ", pid));
      FUZZ_CHECK(!Allowed(Decide(filter, SYS_tgkill, {pid, pid, SIGKILL})),
                 absl::StrCat("tgkill ", pid));
    }
    FUZZ_CHECK(!Allowed(Decide(filter, SYS_kill, {kEveryone, SIGKILL})),
               "kill -1");
  }
}

void Executable(const std::string& bytes) {
  mycel::v1::ExecutableSpec spec;
  if (!spec.ParseFromString(bytes)) return;
  absl::Status s = ValidateExecutableSpec(spec);
  if (!s.ok()) return CheckRefusal(s);
  FUZZ_CHECK(spec.command_size() > 0, "no command");
  auto no_nul = [](const std::string& v) {
    return v.find('\0') == std::string::npos;
  };
  for (const std::string& c : spec.command()) FUZZ_CHECK(no_nul(c), c);
  for (const std::string& e : spec.env()) {
    FUZZ_CHECK(no_nul(e), e);
    const size_t eq = e.find('=');
    FUZZ_CHECK(eq != std::string::npos && eq > 0, e);
  }
  FUZZ_CHECK(no_nul(spec.cwd()), spec.cwd());
  FUZZ_CHECK(spec.cwd().empty() || spec.cwd()[0] == '/', spec.cwd());
  FUZZ_CHECK(!spec.has_uid() || spec.uid() != kUnchangedId, "uid");
  FUZZ_CHECK(!spec.has_gid() || spec.gid() != kUnchangedId, "gid");
  // Against a cell with a user namespace and the default map.
  static const PreparedCell* user_cell = [] {
    mycel::v1::CellSpec c;
    c.set_name("fuzz");
    c.add_isolate(mycel::v1::NAMESPACE_USER);
    c.add_isolate(mycel::v1::NAMESPACE_PID);
    absl::StatusOr<PreparedCell> p = PrepareCell(c, Host());
    FUZZ_CHECK(p.ok(), p.status().ToString());
    return new PreparedCell(*std::move(p));
  }();
  absl::Status mapped = CheckIdsMapped(*user_cell, spec);
  if (!mapped.ok()) CheckRefusal(mapped);
}

void IdMap(const std::string& text) {
  absl::StatusOr<std::vector<IdMapRange>> map = ParseIdMap("uid_map", text);
  if (!map.ok()) {
    CheckRefusal(map.status());
    FUZZ_CHECK(absl::StartsWith(map.status().message(), "uid_map: "),
               map.status().ToString());
    return;
  }
  FUZZ_CHECK(map->size() <= kMaxIdMapLines, "too many lines");
  for (size_t i = 0; i < map->size(); ++i) {
    const IdMapRange& a = (*map)[i];
    FUZZ_CHECK(a.count > 0, "an empty range");
    FUZZ_CHECK(uint64_t{a.inside} + a.count <= kUnchangedId &&
                   uint64_t{a.outside} + a.count <= kUnchangedId,
               "a range reaches 4294967295");
    FUZZ_CHECK(IdMapped(*map, a.inside), "first id not mapped");
    for (size_t j = 0; j < i; ++j) {
      const IdMapRange& b = (*map)[j];
      FUZZ_CHECK(!(uint64_t{a.inside} < uint64_t{b.inside} + b.count &&
                   uint64_t{b.inside} < uint64_t{a.inside} + a.count),
                 "ranges overlap inside");
      FUZZ_CHECK(!(uint64_t{a.outside} < uint64_t{b.outside} + b.count &&
                   uint64_t{b.outside} < uint64_t{a.outside} + a.count),
                 "ranges overlap outside");
    }
  }
}

}  // namespace
}  // namespace mycel::cells

namespace mycel::fuzz {

std::vector<std::string> Seeds() {
  using mycel::v1::CellSpec;
  auto cell = [](const CellSpec& c) {
    return std::string(1, '\0') + c.SerializeAsString();
  };
  std::vector<std::string> seeds;
  CellSpec plain;
  plain.set_name("web");
  seeds.push_back(cell(plain));
  CellSpec confined = plain;
  for (auto ns : {mycel::v1::NAMESPACE_PID, mycel::v1::NAMESPACE_MOUNT,
                  mycel::v1::NAMESPACE_USER, mycel::v1::NAMESPACE_NET}) {
    confined.add_isolate(ns);
  }
  confined.set_uid_map("0 100000 65536");
  confined.set_gid_map("0 100000 1000\n1000 200000 10");
  confined.set_seccomp("strict");
  confined.add_seccomp_deny("ptrace");
  confined.add_seccomp_deny("mount");
  confined.add_capabilities("CAP_NET_BIND_SERVICE");
  confined.mutable_limits()->set_cpu_max(0.5);
  confined.mutable_limits()->set_memory_max(64 << 20);
  confined.mutable_limits()->set_pids_max(100);
  confined.mutable_limits()->set_cpuset_cpus("0-1");
  seeds.push_back(cell(confined));
  CellSpec open = plain;  // host pids: the protected pids apply
  open.set_seccomp("default");
  open.add_seccomp_deny("kill");
  open.add_seccomp_deny("not_a_syscall");
  seeds.push_back(cell(open));
  CellSpec none = plain;
  none.set_seccomp("none");
  seeds.push_back(cell(none));
  none.add_seccomp_deny("unshare");
  seeds.push_back(cell(none));
  mycel::v1::ExecutableSpec exe;
  exe.set_cell("web");
  exe.add_command("/bin/sh");
  exe.add_command("-c");
  exe.add_command("echo hi");
  exe.add_env("PATH=/bin");
  exe.set_cwd("/tmp");
  exe.set_uid(1000);
  exe.set_gid(1000);
  exe.mutable_stop_grace()->set_seconds(5);
  seeds.push_back(std::string(1, '\1') + exe.SerializeAsString());
  exe.set_uid(70000);  // not in the default map
  seeds.push_back(std::string(1, '\1') + exe.SerializeAsString());
  seeds.push_back(
      "\2"
      "0 100000 65536");
  seeds.push_back(
      "\2"
      "0 1000 1\n1 100000 65535\n");
  seeds.push_back(
      "\2"
      "4294967294 0 1");
  return seeds;
}

}  // namespace mycel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      mycel::cells::Cell(rest);
      break;
    case 1:
      mycel::cells::Executable(rest);
      break;
    case 2:
      mycel::cells::IdMap(rest);
      break;
  }
  return 0;
}
