// CompressDispatch: the rewritten program decides exactly as libseccomp's,
// checked here with the tests' own BPF interpreter (bpf_interpreter.h), not
// the one the rewrite uses for its proof, over syscall numbers and
// architectures well beyond the ranges the proof samples.
#include "runtime/seccomp/internal/range_dispatch.h"

#include <doctest/doctest.h>
#include <errno.h>
#include <linux/audit.h>
#include <seccomp.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/seccomp/internal/filter_builder.h"
#include "runtime/seccomp/internal/syscall_tables.h"
#include "tests/unit/runtime/seccomp/bpf_interpreter.h"

namespace mycel {
namespace {

namespace si = seccomp_internal;
using testing::DescribeAction;
using testing::RunSeccompFilter;

constexpr uint32_t kOtherPid = 4243;

std::vector<struct sock_filter> Libseccomp(SeccompOptions options) {
  auto built = si::BuildLibseccompFilter(options);
  REQUIRE_MESSAGE(built.ok(), built.status().ToString());
  return *built;
}

// Decides (arch, nr, args) with both programs; returns a description of the
// first difference, or "".
std::string Differ(const std::vector<struct sock_filter>& a,
                   const std::vector<struct sock_filter>& b,
                   const struct seccomp_data& d) {
  auto x = RunSeccompFilter(a, d);
  auto y = RunSeccompFilter(b, d);
  if (!x.ok() || !y.ok()) {
    return absl::StrCat("interpreter: ", x.status().ToString(), " / ",
                        y.status().ToString());
  }
  if (*x == *y) return "";
  return absl::StrCat("arch 0x", absl::Hex(d.arch), " nr ", d.nr, " arg0 0x",
                      absl::Hex(d.args[0]), ": ", DescribeAction(*x), " vs ",
                      DescribeAction(*y));
}

void CheckSameEverywhere(const std::vector<struct sock_filter>& original,
                         const std::vector<struct sock_filter>& rewritten) {
  std::mt19937_64 rng(42);
  std::vector<uint32_t> arches = {
      AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM, 0,
      0xffffffff};
  for (int i = 0; i < 4; ++i) arches.push_back(static_cast<uint32_t>(rng()));
  std::vector<uint32_t> nrs;
  for (uint32_t nr = 0; nr < 1100; ++nr) nrs.push_back(nr);
  for (uint32_t nr = 0x40000000; nr < 0x40000000 + 1100; ++nr) {
    nrs.push_back(nr);
  }
  for (uint32_t nr :
       {0x3fffffffu, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu}) {
    nrs.push_back(nr);
  }
  for (int i = 0; i < 2000; ++i) nrs.push_back(static_cast<uint32_t>(rng()));
  int checked = 0;
  for (uint32_t arch : arches) {
    for (uint32_t nr : nrs) {
      struct seccomp_data d = {};
      d.arch = arch;
      d.nr = static_cast<int>(nr);
      std::string diff = Differ(original, rewritten, d);
      REQUIRE_MESSAGE(diff.empty(), diff);
      // Arguments: a few at random, and the flags and values the default
      // profile's argument checks look at.
      for (int i = 0; i < 3; ++i) {
        for (auto& arg : d.args) arg = rng();
        diff = Differ(original, rewritten, d);
        REQUIRE_MESSAGE(diff.empty(), diff);
      }
      for (uint64_t v :
           {uint64_t{0x11}, uint64_t{0x10000011}, uint64_t{0x00200000},
            uint64_t{8}, uint64_t{0x20000}, uint64_t{1}, uint64_t{2},
            uint64_t{10}, uint64_t{0xffffffff}}) {
        d = {};
        d.arch = arch;
        d.nr = static_cast<int>(nr);
        d.args[0] = v;
        diff = Differ(original, rewritten, d);
        REQUIRE_MESSAGE(diff.empty(), diff);
        ++checked;
      }
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("the default profile: half the instructions, the same decisions") {
  std::vector<struct sock_filter> original = Libseccomp({});
  auto rewritten = si::CompressDispatch(original);
  REQUIRE_MESSAGE(rewritten.ok(), rewritten.status().ToString());
  MESSAGE("default: ", original.size(), " -> ", rewritten->size(),
          " instructions");
  CHECK(rewritten->size() * 2 < original.size());
  CheckSameEverywhere(original, *rewritten);
  // And it is what BuildSeccompFilter hands out.
  auto built = si::BuildSeccompFilter({});
  REQUIRE(built.ok());
  CHECK(built->size() == rewritten->size());
}

TEST_CASE("strict, and extra_deny on none, decide alike after the rewrite") {
  SeccompOptions strict;
  strict.profile = SeccompProfileKind::kStrict;
  SeccompOptions none;
  none.profile = SeccompProfileKind::kNone;
  none.extra_deny = {"mkdir", "unshare"};
  SeccompOptions more;
  more.extra_deny = {"getpid", "clone"};
  int compressed = 0;
  for (const SeccompOptions& o : {strict, none, more}) {
    std::vector<struct sock_filter> original = Libseccomp(o);
    auto rewritten = si::CompressDispatch(original);
    MESSAGE(original.size(), " -> ",
            rewritten.ok() ? absl::StrCat(rewritten->size())
                           : rewritten.status().ToString());
    if (!rewritten.ok()) {
      // Too small to gain anything is a fine answer; anything else is not.
      CHECK_MESSAGE(
          rewritten.status().message().find("no smaller") != std::string::npos,
          rewritten.status().ToString());
      continue;
    }
    CHECK(rewritten->size() < original.size());
    CheckSameEverywhere(original, *rewritten);
    ++compressed;
  }
  // strict and default-plus-denials are large tables: both shrink.
  CHECK(compressed >= 2);
}

// Cells without a pid namespace: argument checks on pids, process groups,
// -1 and commands, some of them on two arguments at once (fcntl's F_SETOWN
// and the pid). The proof must cover them; here the tests' own interpreter
// runs both programs over every combination of the values those checks
// compare against, on every argument they look at, for each ABI.
constexpr uint32_t kDaemon = 4242;
constexpr uint32_t kHelper = 70001;

SeccompOptions Protecting() {
  SeccompOptions options;
  options.protected_pids = {1, static_cast<pid_t>(kDaemon),
                            static_cast<pid_t>(kHelper)};
  options.deny_broadcast_signals = true;
  return options;
}

TEST_CASE("protected pids: the rewrite decides alike, arguments and all") {
  for (auto kind :
       {SeccompProfileKind::kDefault, SeccompProfileKind::kStrict}) {
    CAPTURE(SeccompProfileName(kind));
    SeccompOptions options = Protecting();
    options.profile = kind;
    std::vector<struct sock_filter> original = Libseccomp(options);
    auto rewritten = si::CompressDispatch(original);
    REQUIRE_MESSAGE(rewritten.ok(), rewritten.status().ToString());
    MESSAGE(SeccompProfileName(kind),
            " with 3 protected pids: ", original.size(), " -> ",
            rewritten->size(), " instructions");
    CheckSameEverywhere(original, *rewritten);

    std::vector<uint64_t> values = {
        0, 1, 2, 3, 8, 15, 0x8901, 0x8902, uint64_t{kOtherPid}};
    for (uint32_t p : {1u, kDaemon, kHelper}) {
      for (uint32_t v : {p - 1, p, p + 1, 0 - p, 0 - p - 1}) {
        values.push_back(v);  // 32 bits
        values.push_back(
            static_cast<uint64_t>(int64_t{static_cast<int32_t>(v)}));
      }
    }
    values.push_back(0xdeadbeef00000000u | kDaemon);  // high half: garbage
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    const uint32_t kX32 = 0x40000000;
    struct Abi {
      uint32_t audit, scmp, nr_bit;
    };
    int checked = 0;
    for (Abi abi : {Abi{AUDIT_ARCH_X86_64, SCMP_ARCH_X86_64, 0},
                    Abi{AUDIT_ARCH_I386, SCMP_ARCH_X86, 0},
                    Abi{AUDIT_ARCH_X86_64, SCMP_ARCH_X32, kX32}}) {
      for (const si::TargetRule& rule : si::TargetRules()) {
        int nr = seccomp_syscall_resolve_name_arch(abi.scmp, rule.name);
        if (nr < 0) continue;
        for (uint64_t a0 : values) {
          for (uint64_t a1 : values) {
            for (uint64_t a2 : values) {
              struct seccomp_data d = {};
              d.arch = abi.audit;
              d.nr = nr;
              d.args[0] = a0;
              d.args[1] = a1;
              d.args[2] = a2;
              std::string diff = Differ(original, *rewritten, d);
              REQUIRE_MESSAGE(diff.empty(), rule.name, " ", diff, " arg1 0x",
                              absl::Hex(a1), " arg2 0x", absl::Hex(a2));
              ++checked;
            }
          }
        }
      }
    }
    MESSAGE(checked, " argument combinations decided alike");
  }
}

// The proof on its own: it accepts the rewriter's program, and refuses it
// after any one change to the copy of the argument checks (the protected
// pids' include comparisons on two arguments at once, fcntl's F_SETOWN and
// the pid) or to the dispatch.
TEST_CASE("the proof refuses a rewrite that differs anywhere") {
  for (const SeccompOptions& options : {SeccompOptions{}, Protecting()}) {
    CAPTURE(options.protected_pids.size());
    std::vector<struct sock_filter> original = Libseccomp(options);
    auto rewrite = si::RewriteDispatch(original);
    REQUIRE_MESSAGE(rewrite.ok(), rewrite.status().ToString());
    REQUIRE(si::ProveSameDecisions(original, *rewrite).ok());
    REQUIRE_FALSE(rewrite->copied_at.empty());

    // Each copied comparison with a constant: off by one, or its two ways
    // out swapped.
    int refused = 0, tried = 0;
    for (const auto& [from, to] : rewrite->copied_at) {
      const struct sock_filter& in = original[from];
      if (BPF_CLASS(in.code) != BPF_JMP || BPF_OP(in.code) == BPF_JA) continue;
      si::DispatchRewrite changed = *rewrite;
      changed.program[to].k += 1;
      ++tried;
      refused += !si::ProveSameDecisions(original, changed).ok();
      if (in.jt != in.jf) {
        changed = *rewrite;
        std::swap(changed.program[to].jt, changed.program[to].jf);
        ++tried;
        refused += !si::ProveSameDecisions(original, changed).ok();
      }
    }
    CHECK(tried > 50);
    CHECK(refused == tried);

    // The dispatch: each return value, and each range boundary.
    size_t copy_start = rewrite->program.size();
    for (const auto& entry : rewrite->copied_at) {
      copy_start = std::min(copy_start, entry.second);
    }
    for (size_t pc = 0; pc < copy_start; ++pc) {
      const struct sock_filter& in = rewrite->program[pc];
      if (in.code == (BPF_RET | BPF_K) ||
          in.code == (BPF_JMP | BPF_JGE | BPF_K)) {
        si::DispatchRewrite changed = *rewrite;
        changed.program[pc].k += 1;
        CHECK_MESSAGE(!si::ProveSameDecisions(original, changed).ok(),
                      "dispatch instruction ", pc);
      }
    }
  }
}

TEST_CASE("a dispatch that tests bits of the number is left alone") {
  // nr & 1 ? ALLOW : ERRNO(EPERM): not piecewise constant over ranges.
  std::vector<struct sock_filter> odd = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 1, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  auto rewritten = si::CompressDispatch(odd);
  CHECK(absl::IsFailedPrecondition(rewritten.status()));
}

TEST_CASE("the rewrite's interpreter runs programs as the kernel would") {
  struct seccomp_data d = {};
  d.nr = 7;
  d.args[1] = 5;
  // A = nr * 2 + args[1] (low word); RET A.
  std::vector<struct sock_filter> sum = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
      BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, 2),
      BPF_STMT(BPF_ST, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
               offsetof(struct seccomp_data, args) + 8),
      BPF_STMT(BPF_MISC | BPF_TAX, 0),
      BPF_STMT(BPF_LD | BPF_MEM, 3),
      BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0),
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  CHECK(si::RunSeccompProgram(sum, d).value() == 19);
  CHECK(testing::RunSeccompFilter(sum, d).value() == 19);
  // Dividing by a zero X ends the program with 0, as in the kernel.
  std::vector<struct sock_filter> div = {
      BPF_STMT(BPF_LD | BPF_IMM, 9),
      BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0),
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  CHECK(si::RunSeccompProgram(div, d).value() == 0);
  // Running off the end, and loads past seccomp_data, are errors.
  std::vector<struct sock_filter> open_end = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0)};
  CHECK(absl::IsInvalidArgument(si::RunSeccompProgram(open_end, d).status()));
  std::vector<struct sock_filter> far = {BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64),
                                         BPF_STMT(BPF_RET | BPF_A, 0)};
  CHECK(absl::IsInvalidArgument(si::RunSeccompProgram(far, d).status()));
}

}  // namespace
}  // namespace mycel
