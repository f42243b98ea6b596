// CloneVm: clone3(2) for a child that shares the caller's memory.
//
// glibc's clone(2) wrapper runs a function on a new stack, but clone(2)
// cannot place the child in a cgroup: the child has to move itself there by
// writing cgroup.procs. That move takes the kernel's cgroup threadgroup
// rwsem for writing, which (unless the cgroup2 mount has favordynmods)
// waits for an RCU grace period when the previous move was more than a few
// milliseconds ago: 7-15 ms per spawn here. clone3 with CLONE_INTO_CGROUP
// starts the child in its cgroup and takes that rwsem only for reading, as
// every fork does. glibc 2.36 exports no clone3 wrapper, and a raw clone3
// with CLONE_VM returns in the child on a stack with no frame, so the child
// side is a few instructions of assembly.
#ifndef MYCEL_RUNTIME_SPAWN_INTERNAL_CLONE_VM_H_
#define MYCEL_RUNTIME_SPAWN_INTERNAL_CLONE_VM_H_

#include <linux/sched.h>

namespace mycel::spawn_internal {

// Whether CloneVm exists on this architecture (x86_64). Elsewhere, and
// where clone3 answers ENOSYS (a kernel before 5.3, or a seccomp filter
// such as Docker's default profile), Spawn uses glibc's clone(2) and the
// child joins its v2 cgroup by writing cgroup.procs.
#if defined(__x86_64__)
inline constexpr bool kHaveCloneVm = true;
#else
inline constexpr bool kHaveCloneVm = false;
#endif

// clone3(args) where args->flags has CLONE_VM and args->stack and
// args->stack_size give the child's stack (16-byte aligned at its top). In
// the caller it returns what clone3 returns: the child's pid, or -1 with
// errno set. The child calls fn(arg) on its stack and exits with fn's
// result if fn returns. The child shares the caller's thread pointer, as
// with glibc's clone(2) without CLONE_SETTLS: it must touch no thread-local
// state but errno, and only while the caller is suspended (CLONE_VFORK).
long CloneVm(struct clone_args* args, int (*fn)(void*), void* arg);

}  // namespace mycel::spawn_internal

#endif  // MYCEL_RUNTIME_SPAWN_INTERNAL_CLONE_VM_H_
