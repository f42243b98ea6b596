// The calling process: who it is, and what it sets up for itself.
#ifndef MYCEL_RUNTIME_PROCESS_H_
#define MYCEL_RUNTIME_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mycel {

// getpid(2), getpgrp(2) and geteuid(2).
pid_t CurrentPid();
pid_t CurrentProcessGroup();
uid_t EffectiveUid();

// The name the kernel shows for the calling thread (PR_SET_NAME; at most
// 15 bytes are kept).
void SetThreadName(const char* name);

// PR_SET_DUMPABLE: whether the process may dump core and be ptrace'd or
// read through /proc by processes of its own uid.
absl::Status SetDumpable(bool dumpable);

// PR_SET_CHILD_SUBREAPER: orphans of the process's descendants are
// re-parented to it rather than to init.
absl::Status BecomeChildSubreaper();

// setsid(2). Fails (EPERM) when the process already leads a process
// group, which a session leader does.
absl::Status StartSession();

// Points standard input at /dev/null.
absl::Status StdinFromDevNull();

// How many descriptors the process has open.
absl::StatusOr<int64_t> OpenFdCount();

// kill(-1, sig): every process this one may signal, except itself (and,
// as PID 1, except init).
absl::Status SignalAllProcesses(int sig);

// Collects the status of any one child, as waitpid(-1) does, without
// keeping it: the pid reaped; 0 when `block` is false and none has ended;
// -1 with errno set on failure (ECHILD: no children).
pid_t ReapAnyChild(bool block);

// Reaps every child for ever, as PID 1 must when it cannot go on (it must
// never return: the kernel panics when init exits).
[[noreturn]] void ReapForever();

// The calling process's working directory (getcwd(2)).
absl::StatusOr<std::string> CurrentDir();

// chdir(2).
absl::Status ChangeDir(const std::string& path);

// umask(2): sets the file mode creation mask and returns the old one.
mode_t SetUmask(mode_t mask);

}  // namespace mycel

#endif  // MYCEL_RUNTIME_PROCESS_H_
