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
// result is used only once it is proven equal to the input:
//  - before it reads an argument, a program compares the architecture and
//    the number only against constants (JEQ, JGT, JGE), so its outcome is
//    constant between consecutive constants (and their successors); both
//    programs are run at every such point of both axes, which covers every
//    one of the 2^32 x 2^32 inputs;
//  - the argument checks are copied in order, and every jump in the copy is
//    checked to land on the copy of the instruction it landed on before;
//  - both programs are also run on arguments made of the constants the
//    argument checks compare against, at every point above where the
//    outcome depends on arguments.
#ifndef MYCEL_RUNTIME_SECCOMP_INTERNAL_RANGE_DISPATCH_H_
#define MYCEL_RUNTIME_SECCOMP_INTERNAL_RANGE_DISPATCH_H_

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace mycel::seccomp_internal {

// Runs a classic BPF seccomp program on `data` as the kernel would.
// INVALID_ARGUMENT for an instruction seccomp does not accept, a jump out of
// the program, or running off its end.
absl::StatusOr<uint32_t> RunSeccompProgram(
    const std::vector<struct sock_filter>& program,
    const struct seccomp_data& data);

// The program rewritten as described above, or FAILED_PRECONDITION naming
// why it cannot be (a shape this rewrite does not handle, or a result that
// is not provably equal to `program`); the caller then keeps `program`.
absl::StatusOr<std::vector<struct sock_filter>> CompressDispatch(
    const std::vector<struct sock_filter>& program);

}  // namespace mycel::seccomp_internal

#endif  // MYCEL_RUNTIME_SECCOMP_INTERNAL_RANGE_DISPATCH_H_
