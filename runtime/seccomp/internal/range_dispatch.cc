#include "runtime/seccomp/internal/range_dispatch.h"

#include <stddef.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mycel::seccomp_internal {
namespace {

constexpr uint32_t kNrOffset = offsetof(struct seccomp_data, nr);
constexpr uint32_t kArchOffset = offsetof(struct seccomp_data, arch);
constexpr uint16_t kLoadAbs = BPF_LD | BPF_W | BPF_ABS;
constexpr size_t kMaxJump = 255;  // jt and jf are 8 bits

absl::Status Unfit(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("seccomp dispatch not compressed: ", why));
}

bool IsConstantCompare(const struct sock_filter& in) {
  if (BPF_CLASS(in.code) != BPF_JMP || BPF_SRC(in.code) != BPF_K) return false;
  uint16_t op = BPF_OP(in.code);
  return op == BPF_JEQ || op == BPF_JGT || op == BPF_JGE;
}

// What the accumulator holds while a program dispatches.
enum class Holds { kZero, kNr, kArch };

// Where the dispatch of one (arch, nr) ends: a return, or the first
// instruction that looks at something else (an argument, most often), with
// what the accumulator holds there. X and scratch memory are still zero.
struct Outcome {
  bool is_return = false;
  uint32_t value = 0;          // the return value, or the entry's pc
  Holds holds = Holds::kZero;  // kZero for a return: nothing comes after it
  bool operator==(const Outcome& o) const {
    return std::tie(is_return, value, holds) ==
           std::tie(o.is_return, o.value, o.holds);
  }
  bool operator!=(const Outcome& o) const { return !(*this == o); }
  bool operator<(const Outcome& o) const {
    return std::tie(is_return, value, holds) <
           std::tie(o.is_return, o.value, o.holds);
  }
};

bool IsDispatchStep(const struct sock_filter& in) {
  if (in.code == kLoadAbs && (in.k == kNrOffset || in.k == kArchOffset)) {
    return true;
  }
  if (in.code == (BPF_RET | BPF_K)) return true;
  return in.code == (BPF_JMP | BPF_JA) || IsConstantCompare(in);
}

absl::StatusOr<Outcome> Dispatch(const std::vector<struct sock_filter>& p,
                                 uint32_t arch, uint32_t nr) {
  uint32_t a = 0;
  Holds holds = Holds::kZero;
  size_t pc = 0;
  // Jumps only go forward, so every step moves pc on.
  while (pc < p.size()) {
    const struct sock_filter& in = p[pc];
    if (!IsDispatchStep(in))
      return Outcome{false, static_cast<uint32_t>(pc), holds};
    if (in.code == kLoadAbs) {
      holds = in.k == kNrOffset ? Holds::kNr : Holds::kArch;
      a = holds == Holds::kNr ? nr : arch;
      ++pc;
    } else if (in.code == (BPF_RET | BPF_K)) {
      return Outcome{true, in.k, Holds::kZero};
    } else if (BPF_OP(in.code) == BPF_JA) {
      pc += 1 + in.k;
    } else {
      bool taken = BPF_OP(in.code) == BPF_JEQ   ? a == in.k
                   : BPF_OP(in.code) == BPF_JGT ? a > in.k
                                                : a >= in.k;
      pc += 1 + (taken ? in.jt : in.jf);
    }
  }
  return Unfit("a dispatch runs off the end of the program");
}

// Every constant that a dispatch step compares the number (or the
// architecture) against, found by following both edges of every
// comparison from the start, as far as dispatch steps go.
absl::Status CollectConstants(const std::vector<struct sock_filter>& p,
                              std::set<uint32_t>* nr_consts,
                              std::set<uint32_t>* arch_consts) {
  std::set<std::pair<size_t, Holds>> seen;
  std::vector<std::pair<size_t, Holds>> frontier = {{0, Holds::kZero}};
  while (!frontier.empty()) {
    auto [pc, holds] = frontier.back();
    frontier.pop_back();
    if (pc >= p.size()) return Unfit("a jump leaves the program");
    if (!seen.insert({pc, holds}).second) continue;
    const struct sock_filter& in = p[pc];
    if (!IsDispatchStep(in) || in.code == (BPF_RET | BPF_K)) continue;
    if (in.code == kLoadAbs) {
      frontier.push_back(
          {pc + 1, in.k == kNrOffset ? Holds::kNr : Holds::kArch});
    } else if (BPF_OP(in.code) == BPF_JA) {
      frontier.push_back({pc + 1 + in.k, holds});
    } else {
      if (holds == Holds::kNr) nr_consts->insert(in.k);
      if (holds == Holds::kArch) arch_consts->insert(in.k);
      frontier.push_back({pc + 1 + in.jt, holds});
      frontier.push_back({pc + 1 + in.jf, holds});
    }
  }
  return absl::OkStatus();
}

// The first values of the ranges over which comparisons against `consts`
// (JEQ, JGT, JGE) all come out the same.
std::vector<uint32_t> RangeStarts(const std::set<uint32_t>& consts) {
  std::set<uint32_t> starts = {0};
  for (uint32_t k : consts) {
    starts.insert(k);
    if (k != UINT32_MAX) starts.insert(k + 1);
  }
  return {starts.begin(), starts.end()};
}

// Instructions with symbolic jump targets, resolved at the end.
class Assembler {
 public:
  int NewLabel() {
    labels_.push_back(-1);
    return static_cast<int>(labels_.size()) - 1;
  }
  void Place(int label) { labels_[label] = static_cast<int>(code_.size()); }
  // Where `label` was placed. REQUIRES: it was.
  size_t Position(int label) const {
    return static_cast<size_t>(labels_[label]);
  }
  // k, or a jump with targets (-1: the next instruction).
  void Emit(uint16_t code, uint32_t k, int jt = -1, int jf = -1, int ja = -1) {
    code_.push_back({code, k, jt, jf, ja});
  }
  absl::StatusOr<std::vector<struct sock_filter>> Resolve() const {
    std::vector<struct sock_filter> out;
    for (size_t i = 0; i < code_.size(); ++i) {
      const Pending& p = code_[i];
      struct sock_filter f = {p.code, 0, 0, p.k};
      auto offset = [&](int label) -> absl::StatusOr<size_t> {
        if (label < 0) return 0;
        int to = labels_[label];
        if (to <= static_cast<int>(i)) return Unfit("a backward jump");
        return static_cast<size_t>(to) - i - 1;
      };
      if (p.ja >= 0) {
        absl::StatusOr<size_t> o = offset(p.ja);
        if (!o.ok()) return o.status();
        f.k = static_cast<uint32_t>(*o);
      } else if (BPF_CLASS(p.code) == BPF_JMP) {
        absl::StatusOr<size_t> t = offset(p.jt), e = offset(p.jf);
        if (!t.ok()) return t.status();
        if (!e.ok()) return e.status();
        if (*t > kMaxJump || *e > kMaxJump) return Unfit("a jump too far");
        f.jt = static_cast<uint8_t>(*t);
        f.jf = static_cast<uint8_t>(*e);
      }
      out.push_back(f);
    }
    return out;
  }

 private:
  struct Pending {
    uint16_t code;
    uint32_t k;
    int jt, jf, ja;
  };
  std::vector<Pending> code_;
  std::vector<int> labels_;
};

struct Range {
  uint32_t start;
  Outcome outcome;
};

std::vector<Range> Merge(const std::vector<uint32_t>& starts,
                         const std::vector<Outcome>& outcomes) {
  std::vector<Range> out;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (out.empty() || out.back().outcome != outcomes[i]) {
      out.push_back({starts[i], outcomes[i]});
    }
  }
  return out;
}

class Rewriter {
 public:
  explicit Rewriter(const std::vector<struct sock_filter>& p) : p_(p) {}

  absl::StatusOr<DispatchRewrite> Run() {
    std::set<uint32_t> nr_consts, arch_consts;
    if (absl::Status s = CollectConstants(p_, &nr_consts, &arch_consts);
        !s.ok()) {
      return s;
    }
    nr_starts_ = RangeStarts(nr_consts);
    arch_starts_ = RangeStarts(arch_consts);
    // For each range of architectures, the outcome for each range of
    // numbers; ranges of architectures with the same table share a section.
    std::vector<std::vector<Outcome>> tables;
    std::map<std::vector<Outcome>, int> section_of;
    std::vector<std::pair<uint32_t, int>> arch_ranges;
    for (uint32_t arch : arch_starts_) {
      std::vector<Outcome> table;
      for (uint32_t nr : nr_starts_) {
        absl::StatusOr<Outcome> o = Dispatch(p_, arch, nr);
        if (!o.ok()) return o.status();
        if (!o->is_return) entries_.insert(o->value);
        table.push_back(*o);
      }
      auto [it, added] =
          section_of.insert({table, static_cast<int>(tables.size())});
      if (added) tables.push_back(table);
      if (arch_ranges.empty() || arch_ranges.back().second != it->second) {
        arch_ranges.push_back({arch, it->second});
      }
    }
    if (absl::Status s = CopyPlan(); !s.ok()) return s;
    for (size_t pc : entries_) entry_label_[pc] = as_.NewLabel();

    std::vector<int> section_label;
    for (size_t i = 0; i < tables.size(); ++i) {
      section_label.push_back(as_.NewLabel());
    }
    as_.Emit(kLoadAbs, kArchOffset);
    EmitTree(arch_ranges, 0, arch_ranges.size(), [&](size_t i) {
      as_.Emit(BPF_JMP | BPF_JA, 0, -1, -1,
               section_label[arch_ranges[i].second]);
    });
    for (size_t s = 0; s < tables.size(); ++s) {
      as_.Place(section_label[s]);
      std::vector<Range> ranges = Merge(nr_starts_, tables[s]);
      if (ranges.size() == 1) {
        // The same for every number: no need to look at it.
        EmitOutcome(ranges[0].outcome, Holds::kArch);
        continue;
      }
      as_.Emit(kLoadAbs, kNrOffset);
      EmitTree(ranges, 0, ranges.size(),
               [&](size_t i) { EmitOutcome(ranges[i].outcome, Holds::kNr); });
    }
    EmitCopy();
    DispatchRewrite rewrite;
    absl::StatusOr<std::vector<struct sock_filter>> code = as_.Resolve();
    if (!code.ok()) return code.status();
    rewrite.program = *std::move(code);
    for (const auto& [pc, label] : copy_label_) {
      rewrite.copied_at[pc] = as_.Position(label);
    }
    return rewrite;
  }

 private:
  // A binary search over ranges[lo, hi) on the accumulator, calling
  // `leaf(i)` where it falls into ranges[i].
  template <typename R, typename Leaf>
  void EmitTree(const std::vector<R>& ranges, size_t lo, size_t hi,
                const Leaf& leaf) {
    if (hi - lo == 1) {
      leaf(lo);
      return;
    }
    size_t mid = lo + (hi - lo) / 2;
    int right = as_.NewLabel();
    as_.Emit(BPF_JMP | BPF_JGE | BPF_K, Start(ranges[mid]), right, -1);
    EmitTree(ranges, lo, mid, leaf);
    as_.Place(right);
    EmitTree(ranges, mid, hi, leaf);
  }
  static uint32_t Start(const Range& r) { return r.start; }
  static uint32_t Start(const std::pair<uint32_t, int>& r) { return r.first; }

  void EmitOutcome(const Outcome& o, Holds now) {
    if (o.is_return) {
      as_.Emit(BPF_RET | BPF_K, o.value);
      return;
    }
    if (o.holds != now) {
      // The entry expects what the old dispatch left in the accumulator.
      as_.Emit(o.holds == Holds::kZero ? static_cast<uint16_t>(BPF_LD | BPF_IMM)
                                       : kLoadAbs,
               o.holds == Holds::kNr     ? kNrOffset
               : o.holds == Holds::kArch ? kArchOffset
                                         : 0);
    }
    as_.Emit(BPF_JMP | BPF_JA, 0, -1, -1, entry_label_.at(o.value));
  }

  // The instructions reachable from the entries, in their old order.
  absl::Status CopyPlan() {
    std::vector<size_t> frontier(entries_.begin(), entries_.end());
    while (!frontier.empty()) {
      size_t pc = frontier.back();
      frontier.pop_back();
      if (pc >= p_.size()) return Unfit("a jump leaves the program");
      if (!kept_.insert(pc).second) continue;
      const struct sock_filter& in = p_[pc];
      if (BPF_CLASS(in.code) == BPF_RET) continue;
      if (BPF_CLASS(in.code) != BPF_JMP) {
        frontier.push_back(pc + 1);
      } else if (BPF_OP(in.code) == BPF_JA) {
        frontier.push_back(pc + 1 + in.k);
      } else {
        frontier.push_back(pc + 1 + in.jt);
        frontier.push_back(pc + 1 + in.jf);
      }
    }
    return absl::OkStatus();
  }

  void EmitCopy() {
    std::map<size_t, int>& label = copy_label_;
    for (size_t pc : kept_) {
      auto e = entry_label_.find(pc);
      label[pc] = e != entry_label_.end() ? e->second : as_.NewLabel();
    }
    for (size_t pc : kept_) {
      const struct sock_filter& in = p_[pc];
      as_.Place(label[pc]);
      if (BPF_CLASS(in.code) != BPF_JMP) {
        as_.Emit(in.code, in.k);
      } else if (BPF_OP(in.code) == BPF_JA) {
        as_.Emit(in.code, 0, -1, -1, label.at(pc + 1 + in.k));
      } else {
        as_.Emit(in.code, in.k, label.at(pc + 1 + in.jt),
                 label.at(pc + 1 + in.jf));
      }
      // Falling through to an instruction that was not kept cannot happen:
      // the next instruction of a non-jump is reachable, hence kept.
    }
  }

  const std::vector<struct sock_filter>& p_;
  std::vector<uint32_t> nr_starts_, arch_starts_;
  std::set<size_t> entries_;
  std::set<size_t> kept_;
  std::map<size_t, int> entry_label_;
  std::map<size_t, int> copy_label_;  // every kept pc
  Assembler as_;
};

// The constants that the argument checks reachable from `entry` compare
// against, as values for any word of any argument, with their neighbours.
std::vector<uint32_t> ArgumentProbes(const std::vector<struct sock_filter>& p,
                                     size_t entry) {
  std::set<uint32_t> values = {0, 1, UINT32_MAX};
  std::set<size_t> seen;
  std::vector<size_t> frontier = {entry};
  while (!frontier.empty()) {
    size_t pc = frontier.back();
    frontier.pop_back();
    if (pc >= p.size() || !seen.insert(pc).second) continue;
    const struct sock_filter& in = p[pc];
    if (BPF_CLASS(in.code) == BPF_RET) continue;
    if (BPF_CLASS(in.code) != BPF_JMP) {
      frontier.push_back(pc + 1);
    } else if (BPF_OP(in.code) == BPF_JA) {
      frontier.push_back(pc + 1 + in.k);
    } else {
      if (BPF_SRC(in.code) == BPF_K) {
        for (uint32_t v : {in.k - 1, in.k, in.k + 1}) values.insert(v);
      }
      frontier.push_back(pc + 1 + in.jt);
      frontier.push_back(pc + 1 + in.jf);
    }
  }
  return {values.begin(), values.end()};
}

// The constants that the rewritten program's dispatch (its instructions
// before `limit`, where the copy begins) compares the number and the
// architecture against, like CollectConstants. FAILED_PRECONDITION if it
// does anything but load those two or an immediate, compare the
// accumulator with constants, jump, and return: then its outcome might not
// be constant between those constants, nor leave X and scratch memory zero.
absl::Status CollectPrefixConstants(const std::vector<struct sock_filter>& p,
                                    size_t limit, std::set<uint32_t>* nr_consts,
                                    std::set<uint32_t>* arch_consts) {
  std::set<std::pair<size_t, Holds>> seen;
  std::vector<std::pair<size_t, Holds>> frontier = {{0, Holds::kZero}};
  while (!frontier.empty()) {
    auto [pc, holds] = frontier.back();
    frontier.pop_back();
    if (pc >= p.size()) return Unfit("a jump leaves the rewritten program");
    if (pc >= limit) continue;  // the copy: checked on its own
    if (!seen.insert({pc, holds}).second) continue;
    const struct sock_filter& in = p[pc];
    if (in.code == (BPF_LD | BPF_IMM)) {
      // A constant: comparisons with it go the same way for every input.
      frontier.push_back({pc + 1, Holds::kZero});
      continue;
    }
    if (!IsDispatchStep(in)) {
      return Unfit("the rewritten dispatch looks at more than (arch, nr)");
    }
    if (in.code == (BPF_RET | BPF_K)) continue;
    if (in.code == kLoadAbs) {
      frontier.push_back(
          {pc + 1, in.k == kNrOffset ? Holds::kNr : Holds::kArch});
    } else if (BPF_OP(in.code) == BPF_JA) {
      frontier.push_back({pc + 1 + in.k, holds});
    } else {
      if (holds == Holds::kNr) nr_consts->insert(in.k);
      if (holds == Holds::kArch) arch_consts->insert(in.k);
      frontier.push_back({pc + 1 + in.jt, holds});
      frontier.push_back({pc + 1 + in.jf, holds});
    }
  }
  return absl::OkStatus();
}

// Where the rewritten dispatch ends for (arch, nr): a return, or the first
// instruction at or after `limit` (in the copy) that it reaches, with the
// accumulator there.
struct PrefixEnd {
  bool is_return = false;
  uint32_t value = 0;  // the return value, or the pc reached
  uint32_t a = 0;
};

absl::StatusOr<PrefixEnd> RunPrefix(const std::vector<struct sock_filter>& p,
                                    size_t limit, uint32_t arch, uint32_t nr) {
  uint32_t a = 0;
  size_t pc = 0;
  while (pc < limit) {
    const struct sock_filter& in = p[pc];
    if (in.code == (BPF_LD | BPF_IMM)) {
      a = in.k;
      ++pc;
    } else if (in.code == kLoadAbs &&
               (in.k == kNrOffset || in.k == kArchOffset)) {
      a = in.k == kNrOffset ? nr : arch;
      ++pc;
    } else if (in.code == (BPF_RET | BPF_K)) {
      return PrefixEnd{true, in.k, 0};
    } else if (in.code == (BPF_JMP | BPF_JA)) {
      pc += 1 + in.k;
    } else if (IsConstantCompare(in)) {
      bool taken = BPF_OP(in.code) == BPF_JEQ   ? a == in.k
                   : BPF_OP(in.code) == BPF_JGT ? a > in.k
                                                : a >= in.k;
      pc += 1 + (taken ? in.jt : in.jf);
    } else {
      return Unfit("the rewritten dispatch looks at more than (arch, nr)");
    }
  }
  if (pc >= p.size()) return Unfit("the rewritten dispatch runs off the end");
  return PrefixEnd{false, static_cast<uint32_t>(pc), a};
}

// Part 2 of the proof: every instruction that the rewrite says it copied is
// the original's, and every way on from it leads to the copy of where the
// original goes on to. Then, from a copy entered in the original's state,
// the rewrite runs step for step as the original, whatever the input.
absl::Status CheckCopy(const std::vector<struct sock_filter>& p,
                       const DispatchRewrite& rewrite, size_t copy_start) {
  const std::vector<struct sock_filter>& q = rewrite.program;
  auto copied_to = [&](size_t from, size_t to) {
    auto it = rewrite.copied_at.find(from);
    return it != rewrite.copied_at.end() && it->second == to;
  };
  for (const auto& [from, to] : rewrite.copied_at) {
    if (from >= p.size() || to >= q.size() || to < copy_start) {
      return Unfit("the copy map points outside the programs");
    }
    const struct sock_filter& a = p[from];
    const struct sock_filter& b = q[to];
    bool same = a.code == b.code;
    if (same && BPF_CLASS(a.code) == BPF_RET) {
      same = a.k == b.k;
    } else if (same && a.code == (BPF_JMP | BPF_JA)) {
      same = copied_to(from + 1 + a.k, to + 1 + b.k);
    } else if (same && BPF_CLASS(a.code) == BPF_JMP) {
      same = a.k == b.k && copied_to(from + 1 + a.jt, to + 1 + b.jt) &&
             copied_to(from + 1 + a.jf, to + 1 + b.jf);
    } else if (same) {
      same = a.k == b.k && copied_to(from + 1, to + 1);
    }
    if (!same) {
      return Unfit(absl::StrCat("instruction ", to,
                                " of the rewrite is not a faithful copy of ",
                                from));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEqual(const std::vector<struct sock_filter>& a,
                        const std::vector<struct sock_filter>& b,
                        const struct seccomp_data& d) {
  absl::StatusOr<uint32_t> x = RunSeccompProgram(a, d);
  absl::StatusOr<uint32_t> y = RunSeccompProgram(b, d);
  if (!x.ok()) return x.status();
  if (!y.ok()) return y.status();
  if (*x != *y) {
    return Unfit(absl::StrCat("the rewrite answers ", *y, " instead of ", *x,
                              " for arch ", d.arch, " nr ", d.nr));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint32_t> RunSeccompProgram(
    const std::vector<struct sock_filter>& p, const struct seccomp_data& data) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {};
  auto bad = [](size_t pc, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("seccomp program, instruction ", pc, ": ", why));
  };
  for (size_t pc = 0; pc < p.size();) {
    const struct sock_filter& in = p[pc];
    const uint32_t src = BPF_SRC(in.code) == BPF_X ? x : in.k;
    switch (BPF_CLASS(in.code)) {
      case BPF_LD:
      case BPF_LDX: {
        uint32_t v;
        switch (BPF_MODE(in.code)) {
          case BPF_ABS:
            if (BPF_CLASS(in.code) != BPF_LD || BPF_SIZE(in.code) != BPF_W ||
                in.k % 4 != 0 || in.k + 4 > sizeof(data)) {
              return bad(pc, "bad load");
            }
            memcpy(&v, reinterpret_cast<const char*>(&data) + in.k, 4);
            break;
          case BPF_LEN:
            v = sizeof(data);
            break;
          case BPF_IMM:
            v = in.k;
            break;
          case BPF_MEM:
            if (in.k >= BPF_MEMWORDS) return bad(pc, "bad scratch word");
            v = mem[in.k];
            break;
          default:
            return bad(pc, "bad load mode");
        }
        (BPF_CLASS(in.code) == BPF_LD ? a : x) = v;
        ++pc;
        break;
      }
      case BPF_ST:
      case BPF_STX:
        if (in.k >= BPF_MEMWORDS) return bad(pc, "bad scratch word");
        mem[in.k] = BPF_CLASS(in.code) == BPF_ST ? a : x;
        ++pc;
        break;
      case BPF_ALU:
        switch (BPF_OP(in.code)) {
          case BPF_ADD:
            a += src;
            break;
          case BPF_SUB:
            a -= src;
            break;
          case BPF_MUL:
            a *= src;
            break;
          case BPF_DIV:
            if (src == 0) return 0;  // the kernel returns 0 (kill)
            a /= src;
            break;
          case BPF_OR:
            a |= src;
            break;
          case BPF_AND:
            a &= src;
            break;
          case BPF_XOR:
            a ^= src;
            break;
          case BPF_LSH:
            if (src >= 32) return bad(pc, "shift too far");
            a <<= src;
            break;
          case BPF_RSH:
            if (src >= 32) return bad(pc, "shift too far");
            a >>= src;
            break;
          case BPF_NEG:
            a = 0 - a;
            break;
          default:
            return bad(pc, "bad ALU operation");
        }
        ++pc;
        break;
      case BPF_JMP: {
        if (BPF_OP(in.code) == BPF_JA) {
          pc += 1 + in.k;
          break;
        }
        bool taken;
        switch (BPF_OP(in.code)) {
          case BPF_JEQ:
            taken = a == src;
            break;
          case BPF_JGT:
            taken = a > src;
            break;
          case BPF_JGE:
            taken = a >= src;
            break;
          case BPF_JSET:
            taken = (a & src) != 0;
            break;
          default:
            return bad(pc, "bad jump");
        }
        pc += 1 + (taken ? in.jt : in.jf);
        break;
      }
      case BPF_RET:
        if (BPF_RVAL(in.code) == BPF_X) return bad(pc, "RET X");
        return BPF_RVAL(in.code) == BPF_A ? a : in.k;
      case BPF_MISC:
        if (BPF_MISCOP(in.code) == BPF_TAX) {
          x = a;
        } else {
          a = x;
        }
        ++pc;
        break;
      default:
        return bad(pc, "bad instruction class");
    }
  }
  return absl::InvalidArgumentError("seccomp program runs off its end");
}

absl::StatusOr<DispatchRewrite> RewriteDispatch(
    const std::vector<struct sock_filter>& program) {
  if (program.empty()) return Unfit("empty program");
  Rewriter rewriter(program);
  return rewriter.Run();
}

absl::Status ProveSameDecisions(const std::vector<struct sock_filter>& original,
                                const DispatchRewrite& rewrite) {
  const std::vector<struct sock_filter>& q = rewrite.program;
  size_t copy_start = q.size();
  for (const auto& entry : rewrite.copied_at) {
    copy_start = std::min(copy_start, entry.second);
  }
  if (absl::Status s = CheckCopy(original, rewrite, copy_start); !s.ok()) {
    return s;
  }
  // Part 1: both dispatches compare (arch, nr) only with constants, so
  // their outcomes are constant on every box between consecutive constants
  // of either program (and their successors); one corner per box stands
  // for all of it.
  std::set<uint32_t> nr_consts, arch_consts;
  if (absl::Status s = CollectConstants(original, &nr_consts, &arch_consts);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CollectPrefixConstants(q, copy_start, &nr_consts, &arch_consts);
      !s.ok()) {
    return s;
  }
  for (uint32_t arch : RangeStarts(arch_consts)) {
    for (uint32_t nr : RangeStarts(nr_consts)) {
      absl::StatusOr<Outcome> o = Dispatch(original, arch, nr);
      if (!o.ok()) return o.status();
      absl::StatusOr<PrefixEnd> e = RunPrefix(q, copy_start, arch, nr);
      if (!e.ok()) return e.status();
      const std::string where = absl::StrCat(" for arch ", arch, " nr ", nr);
      if (o->is_return) {
        if (!e->is_return || e->value != o->value) {
          return Unfit(
              absl::StrCat("the rewrite does not return ", o->value, where));
        }
        continue;
      }
      // Part 3: the rewrite enters the copy of the original's entry with
      // the accumulator the original has there (X and scratch memory are
      // zero in both: neither dispatch writes them). With part 2, the rest
      // runs alike for every argument, instruction pointer and all.
      auto copy = rewrite.copied_at.find(o->value);
      const uint32_t a = o->holds == Holds::kNr     ? nr
                         : o->holds == Holds::kArch ? arch
                                                    : 0;
      if (e->is_return || copy == rewrite.copied_at.end() ||
          copy->second != e->value || e->a != a) {
        return Unfit(absl::StrCat("the rewrite does not enter the copy of ",
                                  o->value, where));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<struct sock_filter>> CompressDispatch(
    const std::vector<struct sock_filter>& program) {
  absl::StatusOr<DispatchRewrite> rewrite = RewriteDispatch(program);
  if (!rewrite.ok()) return rewrite.status();
  const std::vector<struct sock_filter>& out = rewrite->program;
  if (out.size() >= program.size()) return Unfit("no smaller");
  if (out.size() > BPF_MAXINSNS) return Unfit("too long");
  // The kernel refuses a program whose last instruction is not a return.
  if (BPF_CLASS(out.back().code) != BPF_RET) {
    return Unfit("the rewrite does not end with a return");
  }
  if (absl::Status s = ProveSameDecisions(program, *rewrite); !s.ok()) {
    return s;
  }

  // And, as a check of the proof, both programs run at a corner of every
  // box of the original, with arguments of zeros, and where the outcome
  // depends on arguments, with each argument word set to each constant
  // that the argument checks of that syscall compare against, and its
  // neighbours.
  std::set<uint32_t> nr_consts, arch_consts;
  if (absl::Status s = CollectConstants(program, &nr_consts, &arch_consts);
      !s.ok()) {
    return s;
  }
  std::map<uint32_t, std::vector<uint32_t>> probes;  // by entry
  for (uint32_t arch : RangeStarts(arch_consts)) {
    for (uint32_t nr : RangeStarts(nr_consts)) {
      struct seccomp_data d = {};
      d.arch = arch;
      d.nr = static_cast<int>(nr);
      if (absl::Status s = CheckEqual(program, out, d); !s.ok()) return s;
      absl::StatusOr<Outcome> o = Dispatch(program, arch, nr);
      if (!o.ok()) return o.status();
      if (o->is_return) continue;
      auto [it, added] = probes.try_emplace(o->value);
      if (added) it->second = ArgumentProbes(program, o->value);
      for (size_t arg = 0; arg < 6; ++arg) {
        for (uint32_t v : it->second) {
          for (int half = 0; half < 2; ++half) {
            struct seccomp_data with = d;
            with.args[arg] = half == 0 ? uint64_t{v} : uint64_t{v} << 32;
            if (absl::Status s = CheckEqual(program, out, with); !s.ok()) {
              return s;
            }
          }
        }
      }
    }
  }
  return std::move(rewrite->program);
}

}  // namespace mycel::seccomp_internal
