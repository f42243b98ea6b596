// What myceld does with the signals it does not wait for on its event
// loop. A daemon, and above all a PID 1, must not die of a signal it did
// not ask for, so no signal keeps a default action that ends the process
// except when the kernel raises it for a real fault in the daemon itself.
#ifndef MYCEL_RUNTIME_SIGNALS_H_
#define MYCEL_RUNTIME_SIGNALS_H_

#include <cstdint>
#include <vector>

namespace mycel {

// The signals whose default action is to end or stop the process and
// that the kernel also raises for a fault of the process itself: SIGSEGV,
// SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS and SIGABRT.
std::vector<int> FaultSignals();

// Installs a handler for each of FaultSignals(): when the kernel raised
// the signal for a fault of this process (si_code > 0), or the process
// raised it itself (abort(3)), the default action is restored and takes
// place (a core dump), as if no handler existed; when another process
// sent it (kill -SEGV), it is counted and ignored. Async-signal-safe.
void GuardFaultSignals();

// How many fault signals sent by other processes were ignored.
uint64_t IgnoredFaultSignals();

// A handler that does nothing, for signals that must not end the daemon
// but whose arrival must not be SIG_IGN either: an ignored disposition
// survives execve into every process the daemon starts, while a handled
// one is reset by clone3(CLONE_CLEAR_SIGHAND) at no cost. SIGPIPE gets it:
// a write to a closed pipe or socket then fails with EPIPE.
void CatchAndDiscard(int sig);

// Sets `sig` to SIG_IGN. Returns false when the signal refuses it (SIGKILL,
// SIGSTOP, and the real-time signals glibc keeps for itself).
bool IgnoreSignal(int sig);

// Clears the calling thread's signal mask (sigprocmask(SIG_SETMASK)).
void UnblockAllSignals();

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SIGNALS_H_
