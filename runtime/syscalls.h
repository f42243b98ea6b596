// Raw system calls that glibc 2.36 lacks or must not be used for.
//
// Every function here is one syscall(2) with no hidden state, so each is
// async-signal-safe and may be called in a child created by a raw clone3
// from a multi-threaded process. That is also why the credential calls are
// here: glibc's setresuid/setresgid/setgroups broadcast the change to every
// thread of the process (SIGSETXID, under a lock that another thread of the
// parent may have held at clone time), which can deadlock in such a child.
//
// Each returns what the kernel returns: >= 0 on success, -1 with errno set on
// failure.
//
// The plain calls at the end are here for loops that act on errno values
// and must not pay for a Status: the log keeper's copy loop (which writes
// strerror(errno) into the log it keeps) and the run session's pipe reads.
// Everywhere else, use the Status functions of fs.h and fd.h.
#ifndef MYCEL_RUNTIME_SYSCALLS_H_
#define MYCEL_RUNTIME_SYSCALLS_H_

#include <fcntl.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>

namespace mycel::sys {

// clone3(2). Without CLONE_VM and with a zero stack it behaves like fork():
// the child continues on a copy of the caller's stack and returns 0.
inline long Clone3(struct clone_args* args, size_t size) {
  return syscall(SYS_clone3, args, size);
}

inline int PidfdOpen(pid_t pid, unsigned int flags) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, flags));
}

inline int PidfdSendSignal(int pidfd, int sig, siginfo_t* info,
                           unsigned int flags) {
  return static_cast<int>(
      syscall(SYS_pidfd_send_signal, pidfd, sig, info, flags));
}

inline int PidfdGetfd(int pidfd, int targetfd, unsigned int flags) {
  return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, targetfd, flags));
}

// setns(2) with either a namespace fd or (kernel >= 5.8) a pidfd.
inline int Setns(int fd, int nstype) {
  return static_cast<int>(syscall(SYS_setns, fd, nstype));
}

inline int PivotRoot(const char* new_root, const char* put_old) {
  return static_cast<int>(syscall(SYS_pivot_root, new_root, put_old));
}

inline int Openat2(int dirfd, const char* path, struct open_how* how,
                   size_t size) {
  return static_cast<int>(syscall(SYS_openat2, dirfd, path, how, size));
}

inline int Setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  return static_cast<int>(syscall(SYS_setresuid, ruid, euid, suid));
}

inline int Setresgid(gid_t rgid, gid_t egid, gid_t sgid) {
  return static_cast<int>(syscall(SYS_setresgid, rgid, egid, sgid));
}

inline int Setgroups(size_t size, const gid_t* list) {
  return static_cast<int>(syscall(SYS_setgroups, size, list));
}

inline int CloseRange(unsigned int first, unsigned int last,
                      unsigned int flags) {
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

inline ssize_t Read(int fd, void* buf, size_t n) { return ::read(fd, buf, n); }

inline ssize_t Write(int fd, const void* buf, size_t n) {
  return ::write(fd, buf, n);
}

inline ssize_t Pread(int fd, void* buf, size_t n, off_t offset) {
  return ::pread(fd, buf, n, offset);
}

inline int Open(const char* path, int flags, mode_t mode = 0) {
  return ::open(path, flags, mode);
}

inline int Fstat(int fd, struct stat* st) { return ::fstat(fd, st); }

inline int Fchmod(int fd, mode_t mode) { return ::fchmod(fd, mode); }

inline int Mkdir(const char* path, mode_t mode) { return ::mkdir(path, mode); }

inline int Rename(const char* from, const char* to) {
  return ::rename(from, to);
}

}  // namespace mycel::sys

#endif  // MYCEL_RUNTIME_SYSCALLS_H_
