// A QEMU microVM booted from the image that packaging/image/build.sh makes,
// for e2e tests: started with packaging/image/boot.sh, its serial console
// captured to a file, its API reached with the mycel CLI over mTLS.
#ifndef MYCEL_TESTS_E2E_GUEST_H_
#define MYCEL_TESTS_E2E_GUEST_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/testing/process.h"

namespace mycel::testing {

// Where build.sh put the image for this build tree (the ctest fixture
// e2e_image_build writes it).
std::string ImageDir();

// One boot of one guest. QEMU runs in its own session with PR_SET_PDEATHSIG,
// so neither a failed assertion (the destructor kills it) nor a killed test
// binary leaves a QEMU behind. Not thread-safe.
class Guest final {
 public:
  // `initrd` empty boots <image_dir>/initramfs.img. `append` adds kernel
  // command-line words. The console is written to `console_path`.
  Guest(std::string image_dir, std::string console_path,
        std::string initrd = "", std::string append = "");
  ~Guest();  // SIGKILLs QEMU's process group if QEMU still runs
  Guest(const Guest&) = delete;
  Guest& operator=(const Guest&) = delete;

  // Starts boot.sh (which execs QEMU) with a free loopback port forwarded to
  // the guest's API port. Returns false with `*error` set if it could not be
  // started.
  bool Start(std::string* error);

  // Polls `mycel node health` over mTLS until it exits 0 (true), QEMU exits
  // or `timeout` passes (false).
  bool WaitHealthy(std::chrono::milliseconds timeout);

  // Waits until the console shows `text` (true), QEMU exits or `timeout`
  // passes (false).
  bool WaitForConsole(const std::string& text,
                      std::chrono::milliseconds timeout);

  // Waits for QEMU to exit. Returns its exit code, 128+signal if a signal
  // ended it, or -1 if it still runs after `timeout`.
  int Wait(std::chrono::milliseconds timeout);

  // Runs the mycel CLI against this guest's API (global flags first).
  CommandResult Cli(std::vector<std::string> args) const;

  // Everything the guest wrote to its serial console so far.
  std::string Console() const;

  int api_port() const { return api_port_; }
  pid_t qemu_pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

 private:
  // Reaps QEMU if it has exited; returns false while it runs.
  bool Reaped();
  void Kill();

  std::string image_dir_;
  std::string console_path_;
  std::string initrd_;
  std::string append_;
  int api_port_ = 0;
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_E2E_GUEST_H_
