// A smaller seccomp program with the same decisions as libseccomp's.
//
// libseccomp compiles a profile into a tree that tests one syscall number
// per instruction (903 of the default profile's 1149 instructions), and the
// kernel's cost of loading a program, which every executable pays, grows
// with its length (the conversion to eBPF and the JIT are linear). Yet the
// default profile's decision, as a function of the syscall number, changes
// only about 70 times on x86_64 and 120 times on i386: runs of consecutive
// numbers share an outcome.
//
// CompressDispatch rewrites the part of a program that looks only at the
// architecture and the syscall number into binary searches over those runs,
// and keeps the rest (the argument checks) instruction for instruction. The
// result is used only once it is proven equal to the input, for every
// architecture, number and argument value (ProveSameDecisions):
//  1. before it reads anything else, each program compares the architecture
//     and the number only against constants (JEQ, JGT, JGE), so its outcome
//     is constant between consecutive constants of either program (and
//     their successors); both are run at a corner of every such box, which
//     covers every one of the 2^32 x 2^32 (arch, nr) pairs: either both
//     return the same value, or
//  2. the rewrite enters its copy of the instruction where the original
//     leaves its dispatch, with the same accumulator (X and scratch memory
//     are zero in both), and
//  3. every copied instruction is the original's, and each way on from it
//     (next instruction, jump targets) is the copy of the original's: from
//     the same state, the copy runs step for step as the original, whatever
//     the arguments (or the instruction pointer) hold.
// As a check of the proof, both programs are also run with each argument
// word set to each constant that the argument checks of that syscall compare
// against, and their neighbours.
#ifndef MYCEL_RUNTIME_SECCOMP_INTERNAL_RANGE_DISPATCH_H_
#define MYCEL_RUNTIME_SECCOMP_INTERNAL_RANGE_DISPATCH_H_

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"

namespace mycel::seccomp_internal {

// Runs a classic BPF seccomp program on `data` as the kernel would.
// INVALID_ARGUMENT for an instruction seccomp does not accept, a jump out of
// the program, or running off its end.
absl::StatusOr<uint32_t> RunSeccompProgram(
    const std::vector<struct sock_filter>& program,
    const struct seccomp_data& data);

// A rewrite before its proof: the program, and where in it the rewriter put
// its copy of each instruction of the original that it kept.
struct DispatchRewrite {
  std::vector<struct sock_filter> program;
  std::map<size_t, size_t> copied_at;  // original pc -> pc in `program`
};

// The rewrite, unproven; FAILED_PRECONDITION for a shape it does not handle.
// For tests: use CompressDispatch.
absl::StatusOr<DispatchRewrite> RewriteDispatch(
    const std::vector<struct sock_filter>& program);

// OK when `rewrite.program` returns what `original` returns for every
// seccomp_data, by the argument above, taking nothing on trust from the
// rewriter but the copy map, which it checks; FAILED_PRECONDITION naming
// the first step of the argument that fails otherwise.
absl::Status ProveSameDecisions(const std::vector<struct sock_filter>& original,
                                const DispatchRewrite& rewrite);

// The program rewritten as described above, or FAILED_PRECONDITION naming
// why it cannot be (a shape this rewrite does not handle, or a result that
// is not provably equal to `program`); the caller then keeps `program`.
absl::StatusOr<std::vector<struct sock_filter>> CompressDispatch(
    const std::vector<struct sock_filter>& program);

}  // namespace mycel::seccomp_internal

#endif  // MYCEL_RUNTIME_SECCOMP_INTERNAL_RANGE_DISPATCH_H_
