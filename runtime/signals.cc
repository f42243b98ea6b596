#include "runtime/signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

namespace mycel {
namespace {

std::atomic<uint64_t> ignored_faults{0};

void OnFaultSignal(int sig, siginfo_t* info, void*) {
  // si_code > 0: the kernel raised it (a bad access, an illegal
  // instruction, a seccomp trap). SI_TKILL from our own pid: raise(3) or
  // abort(3), which re-raises after a handler returns. Both must take
  // their default action.
  const bool own =
      info == nullptr || info->si_code > 0 || info->si_pid == getpid();
  if (!own) {
    ignored_faults.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  // A fault repeats when the handler returns, now with the default action;
  // a raised signal is raised again.
  if (info != nullptr && info->si_code <= 0) raise(sig);
}

void Discard(int) {}

}  // namespace

std::vector<int> FaultSignals() {
  return {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT};
}

void GuardFaultSignals() {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnFaultSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : FaultSignals()) sigaction(sig, &sa, nullptr);
}

uint64_t IgnoredFaultSignals() {
  return ignored_faults.load(std::memory_order_relaxed);
}

void CatchAndDiscard(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = Discard;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

bool IgnoreSignal(int sig) { return signal(sig, SIG_IGN) != SIG_ERR; }

void UnblockAllSignals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace mycel
